"""``ProducerSlot``: the session's one transactional producer, and its replacement.

A producer that failed -- a produce refused, an EndTxn whose outcome only the broker
knows, a fencing answer -- is never used again: ``replace`` re-initialises its id under
a bumped epoch (KIP-360, ``_reinit``), which aborts whatever it left open, closes it
whether or not that succeeded, and starts a new one. A new one that cannot start (its
FindCoordinator or InitProducerId unanswered) leaves the slot empty (``failed``), for
the next ``replace`` to fill: the session retries it on its own clock, records or not.

The cluster's capabilities and the protocols chosen from them (``_protocols``) are
detected with the first producer of a start and checked again with each replacement (a
cluster may be upgraded or downgraded under a running app).
"""

from __future__ import annotations

from collections.abc import Callable

from aiokafka import AIOKafkaProducer

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import ProducerFencedError, TransientError
from ._protocols import Protocols, detect, recheck
from ._reinit import IdClaim, reinit


class ProducerSlot:
    def __init__(self, config: EosConfig, claim: IdClaim, batch_bytes: int | None) -> None:
        self.config = config
        # the producer's batch size limit (``_sizing``); None: the config's
        self.batch_bytes = batch_bytes
        self.claim = claim  # our start, as the group shows it (``_reinit``)
        self.producer: AIOKafkaProducer | None = None
        self.partitioner: ak.Partitioner | None = None  # the producer's, for whole batches
        self.caps: ak.Capabilities | None = None
        self.protocols: Protocols | None = None  # None: detected by the next ``open``
        # whether the transaction ending is the app's last (its stop was asked): then no
        # replacement; read when one would start, so a stop asked mid-end counts too
        self.last: Callable[[], bool] = ProducerSlot.never

    @staticmethod
    def never() -> bool:
        """``last`` outside an app's last transaction."""
        return False

    async def open(self) -> AIOKafkaProducer:
        """Start a producer (InitProducerId) into the empty slot; with no protocols yet
        (a start), detect them, else check them again. A producer that fails to start
        is closed; a fencing answer is ``ProducerFencedError``."""
        assert self.producer is None, "the slot holds a producer"
        cfg = self.config
        producer = ak.producer_for(cfg, self.batch_bytes)
        try:
            # a replacement's servers answered before: failing to reach them is transient
            replacing = self.protocols is not None
            await ak.start(producer, cfg, "InitProducerId", "WRITE", reached=replacing)
            if self.protocols is None:
                self.caps, self.protocols = await detect(cfg, producer)
            else:
                self.caps, self.protocols = await recheck(cfg, producer, self.protocols)
        except BaseException as exc:
            await ak.close_producer(producer, timeout_s=5.0)  # no half-started client left
            if isinstance(exc, ak.Fenced):
                raise ProducerFencedError(cfg.transactional_id, str(exc)) from None
            raise
        self.producer, self.partitioner = producer, ak.Partitioner(producer)
        return producer

    def failed(self) -> bool:
        """Whether the slot is empty or its producer went fatal under aiokafka."""
        return self.producer is None or ak.producer_failure(self.producer) is not None

    async def replace(self, fenced: str | None) -> None:
        """KIP-360 on the producer in the slot, if any (``fenced``: the answer that
        fenced it; ``reinit`` says when that is fatal), closed whatever came of it, then
        a new one (``open``). Raises what the broker answered; the slot is then empty.
        Not for the ``last`` transaction's end, fencing aside: the app stops, so a new
        producer would only be closed -- and with the brokers gone, its tries and the
        old one's re-initialisation would hold the stop up for several transaction
        timeouts. ``TransientError`` says so; the broker aborts a transaction left open
        once its timeout passes, and the next instance's InitProducerId at once."""
        if self.last() and fenced is None:
            raise TransientError("ending the last transaction", "not recovered: stopping")
        old, self.producer, self.partitioner = self.producer, None, None
        if old is not None:
            try:
                await reinit(old, self.config, self.caps, fenced, self.claim)
            finally:  # whether we go on or not, the old producer is done
                await ak.close_producer(old, timeout_s=5.0)
        await self.open()

    async def close(self, broken: bool = False) -> None:
        """Close the producer in the slot: within 10 s, or 2 s when the session is
        ``broken`` (its broker did not answer: what it holds will not be delivered)."""
        old, self.producer, self.partitioner = self.producer, None, None
        if old is not None:
            await ak.close_producer(old, timeout_s=2.0 if broken else 10.0)
