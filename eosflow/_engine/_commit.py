"""The steps of a commit after the outputs: the store writes into the changelogs, then
the two membership steps -- the offsets into the transaction, then the forced heartbeat.
``TransactSession.end`` runs the first before the flush, the others between the flush and
EndTxn.

Each returns None when the step passed, else the ``Abort`` that makes the transaction
abort. Retries that run out are a reason to abort, never an acceptance. A fencing answer
to the offsets is raised (``_aiokafka.Fenced``; the session recovers or stops on it), as is
a refused permission (``AuthorizationError``, by the adapter).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import FatalError, TransientError
from .._observe import Abort, AbortReason
from .._protocol import codes
from .._state import Stores
from .._timeouts import within
from ._transaction import Transaction

# TxnOffsetCommit answers that mean the group fenced this member off (KIP-447): it is
# a zombie of an older generation or member epoch (v4+ says STALE_MEMBER_EPOCH for the
# consumer protocol's), or no longer a member at all
_GROUP_FENCING = frozenset(
    {
        codes.ILLEGAL_GENERATION,
        codes.STALE_MEMBER_EPOCH,
        codes.UNKNOWN_MEMBER_ID,
        codes.FENCED_INSTANCE_ID,
    }
)


async def commit_offsets(
    producer: AIOKafkaProducer,
    consumer: AIOKafkaConsumer,
    config: EosConfig,
    caps: ak.Capabilities,
    offsets: dict[TopicPartition, int],
    identity: ak.GroupIdentity | None,
    timeout_s: float,
    metadata: Mapping[TopicPartition, str] | None = None,
) -> Abort | None:
    """AddOffsetsToTxn + TxnOffsetCommit, under the generation the partitions were
    assigned under (``identity``), with ``metadata`` per partition (``Stores.written``)."""
    try:
        code = await ak.commit_offsets_in_txn(
            producer,
            config.transactional_id,
            config.group_id,
            offsets,
            caps,
            identity or ak.group_identity(consumer),
            timeout_s,
            metadata,
        )
    except TransientError as exc:
        return Abort(AbortReason.OFFSET_COMMIT_FAILED, str(exc))
    if code == 0:
        return None
    error = ak.map_error(ak.error_for(code), "TxnOffsetCommit")
    if isinstance(error, ak.Fenced):
        raise error
    why = AbortReason.FENCED if code in _GROUP_FENCING else AbortReason.OFFSET_COMMIT_FAILED
    return Abort(why, f"TxnOffsetCommit: {ak.error_name(code)}")


async def confirm_membership(
    consumer: AIOKafkaConsumer,
    config: EosConfig,
    caps: ak.Capabilities,
    identity: ak.GroupIdentity | None,
    timeout_s: float,
) -> Abort | None:
    """The forced heartbeat, its answer awaited: membership confirmed right before EndTxn.
    With KIP-447, REBALANCE_IN_PROGRESS passes: the broker fences the offsets of an old
    generation itself."""
    try:
        with ak.mapped("forced heartbeat"):
            code = await within(ak.forced_heartbeat(consumer, config.group_id, identity), timeout_s)
    except (TransientError, FatalError) as exc:
        return Abort(AbortReason.HEARTBEAT_FAILED, f"forced heartbeat failed: {exc}")
    if code == 0 or (code == ak.REBALANCE_IN_PROGRESS and caps.kip447):
        return None
    return Abort(AbortReason.HEARTBEAT_FAILED, f"forced heartbeat: {ak.error_name(code)}")


async def send_changelog(
    stores: Stores, producer: AIOKafkaProducer, txn: Transaction, timeout_s: float
) -> None:
    """The store writes and position records into the changelogs (``Stores.send``); a
    refusal dooms ``txn``; what no retry fixes is kept in ``txn.fatal`` for ``end`` to
    raise once it aborted, leaving nothing open."""
    try:
        await stores.send(producer, txn.consumed, txn.sends, timeout_s, txn.touched)
    except (TransientError, ak.Fenced) as exc:
        txn.refused = True
        txn.doom(AbortReason.PRODUCE_FAILED, f"changelog produce refused: {exc}")
    except FatalError as exc:  # e.g. a value too large, WRITE refused: abort, then stop
        txn.refused, txn.fatal = True, exc
        txn.doom(AbortReason.PRODUCE_FAILED, f"changelog produce failed: {exc}")
