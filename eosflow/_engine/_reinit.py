"""KIP-360: a transactional producer's id re-initialised after an outcome only the
broker knows, for ``TransactSession``'s recovery."""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaProducer

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import AuthorizationError, EosflowError, ProducerFencedError

log = logging.getLogger("eosflow.session")


async def reinit(
    producer: AIOKafkaProducer, config: EosConfig, caps: ak.Capabilities | None, fenced: str | None
) -> None:
    """Re-initialise ``producer``'s id after an unknown outcome, a failed produce or a
    fencing answer (``fenced``: the answer). With KIP-360 an InitProducerId with the
    current id and epoch bumps the epoch and keeps the id; a ``Fenced`` answer means a
    newer instance owns the transactional id: ``ProducerFencedError``. Without KIP-360 a
    fencing answer is final, and otherwise nothing happens here: the replacement
    producer's InitProducerId aborts and bumps instead. Another failure is logged and
    the caller replaces the producer (unless it followed a fencing answer, which only
    the broker's answer could have resolved: fenced)."""
    txn_id = config.transactional_id
    assert caps is not None
    if fenced is not None and not caps.kip360:
        raise ProducerFencedError(txn_id, fenced)
    if not caps.kip360:
        return  # the replacement producer's InitProducerId aborts and bumps instead
    try:
        with ak.mapped("InitProducerId (KIP-360)"):
            cfg = config
            # after a fencing answer only the broker's answer tells a timed-out epoch
            # from a newer instance: wait for it as long as for any broker failure
            budget = cfg.retry_timeout_s if fenced else cfg.transaction_timeout_s
            await ak.reinit_producer_id(
                producer, cfg.transactional_id, cfg.transaction_timeout_s, timeout_s=budget
            )
    except ak.Fenced as exc:
        raise ProducerFencedError(txn_id, fenced or str(exc)) from None
    except AuthorizationError:
        raise
    except EosflowError as exc:
        if fenced is not None:
            raise ProducerFencedError(txn_id, fenced) from None
        log.warning("KIP-360 re-initialisation failed (%s); replacing the producer", exc)
