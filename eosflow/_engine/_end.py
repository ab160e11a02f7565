"""The end of a transaction, once ``TransactSession.end`` has decided to try a commit or
an abort: flush (the store writes into their changelogs first, then every send
answered), with the offsets into the transaction sent while it waits -> the forced
heartbeat (both ``_commit``) -> EndTxn.

The offsets need no produce answer (an abort discards them with the outputs), so they go
as soon as the last batch is handed over: a commit takes the longer of the two rather
than their sum. Not when their metadata needs the answers -- the changelog offsets of a
partition whose position did not move (``Stores.written``): then they follow the flush.
The forced heartbeat still goes once both are answered, and EndTxn once it is.

Each step runs only while the ones before it passed; a step that fails makes the rest
abort, and what it could not know is resolved, never assumed:

- a producer already failed, or a produce that failed, is a KIP-360 recovery (a new
  producer epoch aborts the transaction; the idempotent producer's sequence numbers
  start afresh) -- ``RECOVERED``;
- an EndTxn that fails or is cancelled leaves the outcome unknown: it is never retried
  as a commit but resolved by the same recovery -- ``RECOVERED`` (or the cancellation,
  re-raised once recovered);
- a fencing answer is raised (``_aiokafka.Fenced``; the session tells a timed-out
  transaction from a newer instance), as is a refused permission.

The session holds its lock around all of it: no revocation runs between the check of
the held partitions and EndTxn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import AuthorizationError, EosflowError, TransientError
from .._observe import Abort, AbortReason, Outcome
from .._state import Stores
from .._timeouts import outlived, step_timeout_s, within
from ._commit import commit_offsets, send_changelog
from ._membership import Membership
from ._transaction import Transaction

log = logging.getLogger("eosflow.session")


@dataclass(frozen=True)
class Ending:
    """What the end of one transaction works with: the session's clients, stores and
    group membership as they are when it ends, and its recovery (KIP-360)."""

    config: EosConfig
    producer: AIOKafkaProducer
    consumer: AIOKafkaConsumer
    stores: Stores
    caps: ak.Capabilities
    group: Membership
    recover: Callable[[AbortReason], Awaitable[None]]


async def decide_and_end(
    e: Ending, txn: Transaction, why: Abort | None, offsets: dict[TopicPartition, int]
) -> tuple[Outcome, Abort | None]:
    """Flush (the offsets beside it), forced heartbeat, EndTxn: each step timed in
    ``txn.phases``; a step that fails makes the rest abort (``_commit``)."""
    failure = ak.producer_failure(e.producer)
    if failure is not None:
        if ak.is_fencing(failure):
            raise ak.Fenced(repr(failure))
        log.warning("producer failed (%r): recovering", failure)
        txn.doom(AbortReason.PRODUCE_FAILED, f"producer failed: {failure!r}")
        await e.recover(AbortReason.PRODUCE_FAILED)
        return Outcome.RECOVERED, txn.doomed
    step_s = step_timeout_s(e.config.transaction_timeout_s)
    # the offsets go while the flush waits for its answers, unless their metadata needs
    # those answers (a changelog written without moving its position: ``Stores.written``)
    early: asyncio.Task[Abort | None] | None = None
    try:
        with txn.phase("flush"):  # the store writes first, then every send answered
            if why is None:
                timeout_s = txn.time_left_s(e.config.transaction_timeout_s)
                await send_changelog(e.stores, e.producer, txn, timeout_s)
                why = txn.doomed
            if why is None and offsets and not e.stores.written_needs_acks():
                early = asyncio.ensure_future(_offsets(e, txn, offsets, step_s))
            await ak.flush(e.producer, txn.sends, e.config.transaction_timeout_s)
    except BaseException as exc:
        if early is not None:  # its outcome no longer matters: the transaction aborts
            early.cancel()
            await asyncio.gather(early, return_exceptions=True)
        if not isinstance(exc, TransientError):
            raise
        # A failed batch leaves the idempotent producer's sequence numbers out of step
        # with the broker's: aborting alone would fail every later transaction the
        # same way. A new epoch (KIP-360) aborts this one and starts them afresh.
        log.warning("produce failed (%s): re-initialising the producer", exc)
        txn.doom(AbortReason.PRODUCE_FAILED, f"produce failed: {exc}")
        await e.recover(AbortReason.PRODUCE_FAILED)
        return Outcome.RECOVERED, txn.doomed
    if early is not None:
        why = await early  # a fencing answer is raised here
    elif why is None and offsets:
        why = await _offsets(e, txn, offsets, step_s)
    if why is None and offsets:
        async with e.group.committing(txn.identity) as ident:  # KIP-848: heartbeats held
            with txn.phase("heartbeat"):
                why = await e.group.confirm(e.caps, ident, step_s)
    why = why or txn.doomed
    with txn.phase("end_txn"):
        outcome = await end_txn(e, why is None)
    if outcome is Outcome.RECOVERED:
        why = Abort(AbortReason.UNKNOWN_OUTCOME, f"EndTxn outcome unknown ({why or 'commit'})")
    return outcome, why


async def _offsets(
    e: Ending, txn: Transaction, offsets: dict[TopicPartition, int], step_s: float
) -> Abort | None:
    """The offsets into the transaction (``commit_offsets``), with the changelog offsets
    ``Stores.written`` gives as their metadata; heartbeats held meanwhile (KIP-848: the
    epoch the offsets carry stays the member's at the broker)."""
    async with e.group.committing(txn.identity) as ident:
        with txn.phase("offsets"):
            written = e.stores.written()
            if written is None:
                return Abort(AbortReason.PRODUCE_FAILED, "a changelog offset is unknown")
            return await commit_offsets(
                e.producer, e.consumer, e.config, e.caps, offsets, ident, step_s, written
            )


async def end_txn(e: Ending, commit: bool) -> Outcome:
    """EndTxn. Any failure but a fencing answer leaves the outcome unknown: it is never
    retried as a commit, but resolved by re-initialising the producer (``e.recover``)."""
    producer = e.producer
    op = asyncio.ensure_future(
        producer.commit_transaction() if commit else producer.abort_transaction()
    )
    # an EndTxn that outlives the wait ends later on its own; its error is accounted
    # for by the recovery, not reported as "never retrieved"
    op.add_done_callback(outlived)
    try:
        with ak.mapped("EndTxn"):
            await within(asyncio.shield(op), e.config.transaction_timeout_s)
    except ak.Fenced:
        raise
    except (EosflowError, asyncio.CancelledError) as exc:
        if isinstance(exc, AuthorizationError):
            raise
        cancelled = isinstance(exc, asyncio.CancelledError)
        log.warning(
            "EndTxn(%s) outcome unknown (%s): re-initialising the producer",
            "commit" if commit else "abort",
            "cancelled" if cancelled else exc,
        )
        await e.recover(AbortReason.UNKNOWN_OUTCOME)
        if cancelled:
            raise
        return Outcome.RECOVERED
    return Outcome.COMMITTED if commit else Outcome.ABORTED
