"""``TransactSession``: franz-go's GroupTransactSession on aiokafka.

One session owns the group membership (``_membership``: the classic protocol or KIP-848),
its read_committed consumer and the transactional producer, so the producer always knows
whether the consumer still owns its partitions. eosflow's own state -- what is committed,
which partitions are ready, the assignment epoch and identity (``Positions``), the open
``Transaction`` -- is the source of truth.

``end(commit=True)`` runs under the session lock, which a revocation must take too:
flush -> AddOffsetsToTxn + TxnOffsetCommit (v3, with the generation or member epoch;
transactions v2: TxnOffsetCommit v5 alone, and EndTxn v5 bumps the epoch) ->
forced heartbeat (awaited) -> EndTxn(commit) only if the transaction's partitions are
still held, the offsets were accepted and the heartbeat confirmed membership; else
EndTxn(abort) and a rewind to the committed offsets. An unknown EndTxn outcome, a failed
produce or a fencing answer is resolved by a KIP-360 re-initialisation; without KIP-447 a
commit holds the lock ``post_commit_delay_s`` more. aiokafka only through ``_aiokafka``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import (
    AuthenticationError,
    AuthorizationError,
    ConfigError,
    EosflowError,
    FatalError,
    ProducerFencedError,
    TransientError,
)
from .._observe import Abort, AbortReason, Observer, Outcome
from .._records import Output, Partition, PartitionOffsets, Record, StateNow
from .._state import Feed, GlobalTable, Serde, Stores, Table, state_settings, subscribed
from .._timeouts import outlived, step_timeout_s
from ._end import Ending, decide_and_end
from ._membership import Membership, MembershipStopped, membership_for
from ._positions import Positions
from ._producer import ProducerSlot
from ._protocols import Protocols
from ._reinit import IdClaim
from ._transaction import Transaction, report_of

log = logging.getLogger("eosflow.session")

PartitionsHook = Callable[[frozenset[tuple[str, int]]], Awaitable[None]]


class TransactSession:
    def __init__(
        self,
        config: EosConfig,
        on_assigned: PartitionsHook | None = None,
        on_revoked: PartitionsHook | None = None,
        stores: Mapping[str, Serde] | None = None,
        observer: Observer | None = None,
        tables: Mapping[str, Table | GlobalTable] | None = None,
        copartitioned: bool = False,
        batch_bytes: int | None = None,
    ) -> None:
        # tables: their topics consumed by the group too, assigned co-partitioned;
        # batch_bytes: the producer's batch size limit (None: the config's, ``_sizing``)
        self.config = config = subscribed(config, tables or {})
        self.observer = observer or Observer()  # told of each transaction, rebalance, recovery
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._lock = asyncio.Lock()
        self._txn: Transaction | None = None  # the open transaction
        self._consumer: AIOKafkaConsumer | None = None
        self._group: Membership | None = None  # classic or consumer protocol: _membership
        self._broken = False  # a recovery did not finish: new producer, positions re-read
        self._recoveries = 0  # recoveries begun (a report tells one that resolved an end)
        self.last_abort_reason: str | None = None  # of the last ABORTED outcome
        self.last_failure_reason: str | None = None  # of the last ABORTED or RECOVERED one
        self._failure: FatalError | None = None  # the rebalance listener's, for poll()
        self._logins = ak.LoginWatch()  # a login refused mid-run (aiokafka retries it)
        # topics the app makes, after the producer started and before the stores and
        # the group (``Engine.before_join``): retried with the rest of the start
        self.prepare: Callable[[AIOKafkaProducer], Awaitable[None]] | None = None
        # output topics whose outputs are held and folded per key until ``end``
        # (``Topic.fold``; the engine sets them from the processor's declarations)
        self.folded: frozenset[str] = frozenset()
        # told the offsets of each committed transaction, once committed (``Engine.
        # after_commit``); must not block: it runs under the session lock
        self.committed_hook: Callable[[AIOKafkaProducer, Mapping[Partition, int]], None] | None = (
            None
        )
        # the transactional producer and its replacement; our start, in the member's
        # client id (_reinit); the cluster's capabilities and protocols
        self._producers = ProducerSlot(config, IdClaim(), batch_bytes)
        on_late = self.observer.late_records
        # the processor's state stores: restored on assignment, written with each commit
        metadata: dict[TopicPartition, str] = {}  # what each partition's commit wrote last
        self.stores = Stores(
            state_settings(config),  # what the state room reads of them
            stores or {},
            self._restored,
            self._restore_failed,
            on_late,
            tables,
            copartitioned,
            metadata,
            Feed(self._caught_up, self._throttle),  # tables: the sync's view of the consumer
        )
        # held, committed, epoch and identity; buffers dropped, tasks kept (_positions)
        self._pos = Positions(
            config, metadata, self.stores.sync.forget, tasks=self.stores.copartitioned
        )

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the producer (InitProducerId) and join the group. Broker failures are
        retried from scratch (half-started clients closed) with a growing backoff for
        ``retry_timeout_s``; then, or at once for what no retry fixes (no bootstrap server
        answers, fencing, authorization), ``FatalError`` naming the bootstrap servers."""
        cfg = self.config
        self._logins.attach()
        where, deadline = f"starting against {cfg.bootstrap_servers}", time.monotonic()
        deadline, delay = deadline + cfg.retry_timeout_s, cfg.retry_backoff_s
        while True:
            try:
                return await self._start()
            except TransientError as exc:
                await self._close_clients()
                if time.monotonic() + delay > deadline:
                    raise FatalError(f"{where}: {exc}") from exc
                log.warning("%s: %s; retrying", where, exc)
            except (ProducerFencedError, AuthorizationError, AuthenticationError, ConfigError):
                raise  # each names its own fix
            except EosflowError as exc:
                raise FatalError(f"{where}: {exc}") from exc
            await asyncio.sleep(delay)
            delay = min(delay * 2, cfg.retry_backoff_max_s)

    async def _start(self) -> None:
        slot = self._producers
        slot.protocols = None  # each start (a retried one too) detects them afresh
        producer = await slot.open()
        cfg, caps, chosen = self.config, slot.caps, slot.protocols
        assert caps is not None and chosen is not None
        self._pos.stable = caps.kip447 and cfg.require_stable_fetch_offsets
        if self.prepare is not None:
            await self.prepare(producer)
        await self.stores.start(producer)
        group = chosen.group
        ranged = self.stores.copartitioned  # partition p of every topic together
        member = ak.member_client_id(cfg, slot.claim.started_us)
        self._group = membership_for(
            cfg, group, self._revoked, self._assigned, self._failed, ranged, member
        )
        self._consumer, self._pos.member = self._group.consumer, self._group.offsets_member
        self.stores.refetch_offsets(self._pos.refetcher(self._consumer))
        await self._group.start()

    async def stop(self) -> None:
        """Abort any open transaction, leave the group, close both clients. Never raises
        for the broker's sake: what cannot be closed cleanly is closed by force."""
        if self._txn is not None:
            try:
                await self.end(commit=False)
            except EosflowError as exc:
                log.warning("aborting on stop failed (%s); the broker aborts it on timeout", exc)
        await self.stores.stop()
        await self._close_clients()
        self._logins.detach()

    async def _close_clients(self) -> None:
        consumer, group = self._consumer, self._group
        self._consumer = self._group = None
        if group is not None:
            await group.leave()
        if consumer is not None:
            await ak.close_consumer(consumer, timeout_s=10.0)
        await self._producers.close(broken=self._broken)

    @property
    def consumer(self) -> AIOKafkaConsumer:
        assert self._consumer is not None, "session not started"
        return self._consumer

    @property
    def producer(self) -> AIOKafkaProducer:
        producer = self._producers.producer
        assert producer is not None, "session not started"
        return producer

    @property
    def caps(self) -> ak.Capabilities | None:
        """What the cluster speaks (ApiVersions), once started."""
        return self._producers.caps

    @property
    def protocols(self) -> Protocols | None:
        """The group protocol and transactions version chosen (``_protocols``)."""
        return self._producers.protocols

    @property
    def in_transaction(self) -> bool:
        return self._txn is not None

    @property
    def opened(self) -> float:
        """When the open transaction began (``time.monotonic()``)."""
        assert self._txn is not None, "no transaction open"
        return self._txn.started

    @property
    def deadline(self) -> float:
        """When the open transaction stops taking records (``time.monotonic()``)."""
        assert self._txn is not None, "no transaction open"
        return self._txn.deadline

    @property
    def epoch(self) -> int:
        """Changes whenever the set of processable partitions (or their positions, after a
        recovery) changed; equal values mean records polled in between are still ours.
        Read it right after ``poll`` (no await between) and pass it to ``begin``."""
        return self._pos.epoch

    # --- the transaction --------------------------------------------------------------

    async def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Records from partitions whose committed offsets are in place, in offset order;
        the listener's ``FatalError``, or ``AuthenticationError`` for a refused login."""
        if self._failure is not None:
            raise self._failure
        await self._logins.check(self.config.bootstrap_servers, self.config.security)
        sync = self.stores.sync  # tables: records wait there, in time order
        wait_s = 0.0 if sync.more else timeout_s
        most = sync.takes if sync.ahead else min(max_records, sync.takes)
        with ak.mapped("consuming (fetch and group membership)", "READ"):
            batch = await ak.poll(self.consumer, wait_s, most)
        txn = self._txn  # sealed: what is polled is the next one's (re-polled after a rewind)
        consumed = txn.consumed if txn is not None and not txn.sealed else {}
        runs = self._pos.runs(batch, consumed)
        # one list; with tables in timestamp order per task, some held back (``_sync``)
        return self.stores.sync.admit(runs, max_records)

    def state_now(self) -> StateNow:
        """What restores and what the local copies hold now (``Stores.state_now``)."""
        return self.stores.state_now()

    def partition_offsets(self) -> dict[Partition, PartitionOffsets]:
        """Where each held partition stands, its lag too (``Positions.offsets``)."""
        if self._consumer is None:
            return {}
        return self._pos.offsets(self._consumer)

    def give_back(self, records: list[Record]) -> None:
        """Return polled, unprocessed records: the next poll delivers them again -- from
        the sync's buffers when it takes them back (tables), else fetched again."""
        if not self.stores.sync.give_back(records):
            self._pos.give_back(self.consumer, records)

    async def reposition(self, records: list[Record], committed: bool) -> None:
        """Undo polling work ahead not adopted (``Positions.reposition``); if that cannot
        be done (a log start unread), the session is ``broken``."""
        await self._positioned(self._pos.reposition(self.consumer, records, committed))

    async def _positioned(self, step: Awaitable[None]) -> None:
        try:
            await step
        except TransientError:  # positions may be past uncommitted records: recover first
            self._broken = True
            raise

    @property
    def broken(self) -> bool:
        """A recovery (or a rewind) did not finish: ``recover`` must succeed before
        anything is polled or begun, since positions may be past uncommitted records."""
        return self._broken

    async def recover(self) -> None:
        """Finish a recovery that did not (``_recover``), records or not; ``TransientError``
        while the broker cannot be reached (the caller retries with its backoff)."""
        if self._broken:
            await self._recover(AbortReason.BROKER_ERROR)

    async def begin(self, epoch: int, adopted: bool = False) -> None:
        """Open a transaction for records polled (or work adopted) under ``epoch``. If the
        assignment changed since -- before this call, during its await (aiokafka's
        ``begin_transaction`` always yields) or later -- ``end`` sees that the epoch moved
        and aborts it. ``adopted``: the work done ahead (and its store writes) is taken
        into this transaction."""
        if self._txn is not None:
            return
        self.stores.begin(adopted)
        identity = self._pos.identity  # before the await: the identity of this epoch, if current
        if self._broken or self._producers.failed():
            # bumps the epoch: records polled before it are stale
            await self._recover(
                AbortReason.BROKER_ERROR if self._broken else AbortReason.PRODUCE_FAILED
            )
        try:
            with ak.mapped("beginning a transaction"):
                await self.producer.begin_transaction()
        except TransientError:
            self._broken = True  # a producer that cannot begin is replaced next time
            raise
        self._txn = Transaction(epoch, identity, time.monotonic() + self.config.commit_interval_s)

    async def send_all(self, outputs: Sequence[Output]) -> None:
        """Produce ``outputs`` in the open transaction as whole batches (``_produce``). A
        refusal (the producer went fatal under us, e.g. fenced, or the broker failed)
        dooms the transaction and drops the rest; ``end`` sorts out why. An output that
        can never be produced is a ``FatalError``. Outputs of ``folded`` topics with a
        key are held instead, the last per key, and sent by ``end`` before its flush."""
        txn = self._txn
        assert txn is not None, "send_all outside a transaction"
        if self.folded:
            outputs = _held(self.folded, txn.held, outputs)
        if txn.refused or not outputs:
            return
        await self._produce(txn, outputs)

    async def _produce(self, txn: Transaction, outputs: Sequence[Output]) -> None:
        partitioner = self._producers.partitioner
        assert partitioner is not None
        try:
            await ak.send_all(
                self.producer,
                partitioner,
                outputs,
                txn.sends,
                step_timeout_s(self.config.transaction_timeout_s),
                txn.time_left_s(self.config.transaction_timeout_s),
            )
        except (TransientError, ak.Fenced) as exc:
            txn.refused = True
            txn.doom(AbortReason.PRODUCE_FAILED, f"produce refused: {exc}")
        txn.outputs += len(outputs)

    def mark_consumed(
        self,
        offsets: dict[tuple[str, int], int],
        records: int = 0,
        dead_lettered: int = 0,
        undecodable: int = 0,
    ) -> None:
        """Record the next offset per (topic, partition) processed in this transaction;
        they commit with it. An offset that does not grow is a ``FatalError``.
        ``records``, ``dead_lettered`` and ``undecodable`` (of those, records that did
        not decode) count what they cover, for the report.

        Committed offsets are the floor only while the transaction's assignment is
        current. A rebalance or recovery since its records were polled re-read them, and
        another member may have committed past those records meanwhile (a partition lost
        and given back): such a transaction is stale, so ``end`` aborts it and rewinds,
        and its offsets are never committed -- that is no bug to stop for."""
        txn = self._txn
        assert txn is not None, "mark_consumed outside a transaction"
        current = txn.epoch == self._pos.epoch
        txn.mark(offsets, self._pos.committed if current else {})
        txn.records += records
        txn.dead_lettered += dead_lettered
        txn.undecodable += undecodable

    def touch(self, partition: tuple[str, int]) -> bool:
        """``Transaction.touch`` while the assignment holds (False when it moved)."""
        txn, committed = self._txn, self._pos.committed.get(TopicPartition(*partition))
        return txn is not None and txn.epoch == self._pos.epoch and txn.touch(partition, committed)

    def seal(self) -> None:
        """The open transaction takes no more records: its store writes are frozen for
        ``end``; what is polled and written from here on is work ahead of the next one.
        Call it right before starting ``end`` when work goes on (``end`` seals too)."""
        if self._txn is not None:
            self._txn.sealed = True
        self.stores.seal()

    def doom(self, reason: AbortReason, detail: str) -> None:
        if self._txn is not None:
            self._txn.doom(reason, detail)

    async def end(
        self,
        commit: bool,
        reason: AbortReason = AbortReason.STOPPED,
        detail: str = "",
        last: Callable[[], bool] | None = None,
    ) -> Outcome:
        """End the open transaction: commit if ``commit`` and every check passes, else
        abort (for ``reason``). Returns the outcome, which the observer is told with the
        transaction's report. Raises ``ProducerFencedError`` when a newer instance owns
        the transactional id, ``TransientError`` when the outcome was unknown and the
        recovery could not reach the broker (the next ``begin`` recovers again) -- or,
        ``last()`` (the app stops), was not attempted: no new producer for a session
        about to close (``ProducerSlot.replace``) -- and ``FatalError`` for what no
        retry can fix (e.g. a refused authorization)."""
        txn = self._txn
        if txn is None:
            return Outcome.EMPTY
        self.seal()
        self._producers.last = last or ProducerSlot.never
        await self._lock.acquire()
        hold = flushed = False
        outcome: Outcome | None = None
        why: Abort | None = None
        escaped: BaseException | None = None
        recoveries = self._recoveries
        try:
            # Under the lock no revocation can run: checked here, it holds until EndTxn.
            stale = self._pos.stale(txn.epoch, txn.consumed)
            if not commit:
                why = Abort(reason, detail or "abort requested")
            else:
                why = txn.doomed or (Abort(AbortReason.REVOKED, stale) if stale else None)
            offsets = {TopicPartition(t, p): off for (t, p), off in txn.consumed.items()}
            if why is None and txn.held:  # the folded topics' last values, before the flush
                await self._send_held(txn)  # a refusal dooms it (decide_and_end reads that)
            try:
                outcome, why = await decide_and_end(self._ending(), txn, why, offsets)
            except ak.Fenced as fenced:
                # A timed-out transaction also bumps the epoch: KIP-360 tells the two apart.
                log.warning("producer epoch fenced (%s): trying KIP-360 recovery", fenced)
                why = Abort(AbortReason.TIMEOUT, f"fenced: {fenced}")
                await self._recover(why.reason, fenced=str(fenced))
                outcome = Outcome.RECOVERED
            if outcome is Outcome.COMMITTED:
                flushed = True  # every send future was awaited and its result read
                self._pos.committed.update(offsets)
                self.stores.committed()
                if self.committed_hook is not None:
                    self.committed_hook(self.producer, txn.consumed)
                # no stable fetches: hold rebalances back so the next owner reads our offsets
                hold = not self._pos.stable and self.config.post_commit_delay_s > 0
            else:
                self.last_failure_reason = str(why)
                if outcome is Outcome.ABORTED:
                    self.last_abort_reason = str(why)
                    log.info("transaction aborted: %s", why)
                    await self._positioned(self._pos.rewind(self.consumer))
            if txn.fatal is not None:  # aborted first: nothing left open on the broker
                raise txn.fatal
            return outcome
        except BaseException as exc:
            escaped = exc
            raise
        finally:
            self._txn, self._producers.last = None, ProducerSlot.never
            if outcome is None and not isinstance(escaped, FatalError):
                # cut short: resolved by a recovery now (or by the next begin's) -- unless
                # the app is stopping on a fatal error, which is then the report
                if self._recoveries > recoveries or self._broken:
                    outcome = Outcome.RECOVERED
            if outcome is not None:
                report = report_of(txn, outcome, why, time.monotonic())
                self.observer.transaction_ended(report)
            if not flushed:  # their errors are accounted for by the outcome
                self.stores.discard()
                for fut in txn.sends:
                    fut.add_done_callback(outlived)
            if hold:
                asyncio.get_running_loop().call_later(
                    self.config.post_commit_delay_s, self._lock.release
                )
            else:
                self._lock.release()

    async def _send_held(self, txn: Transaction) -> None:
        """Send the folded topics' outputs ``txn`` held. A refusal dooms it; an output
        that can never be produced too, and stops the app once it is aborted."""
        try:
            await self._produce(txn, list(txn.held.values()))
        except FatalError as exc:
            txn.fatal = exc
            txn.doom(AbortReason.PRODUCE_FAILED, str(exc))

    def _ending(self) -> Ending:
        """The clients, stores and recovery the end of a transaction works with."""
        caps, group = self.caps, self._group
        assert caps is not None and group is not None
        return Ending(
            self.config, self.producer, self.consumer, self.stores, caps, group, self._recover
        )

    # --- recovery -------------------------------------------------------------------

    async def _recover(self, cause: AbortReason, fenced: str | None = None) -> None:
        """After an unknown EndTxn outcome, a failed produce or a fencing answer: abort via
        a new producer epoch (KIP-360: InitProducerId with the current id and epoch),
        replace the producer, and take positions from the broker's committed offsets.

        Fatal when the broker refuses our epoch and the group shows a newer instance of
        the transactional id (``_reinit``), or -- without KIP-360 -- whenever we were
        ``fenced``: a transaction timeout and a newer instance then look the same, and
        only the second is safe to assume. When the
        broker cannot be reached, raises ``TransientError`` and leaves the session
        ``_broken``: the next ``begin`` recovers again."""
        self._broken = True
        self._recoveries += 1
        self._pos.epoch += 1  # records polled before this are not ours to commit
        await self._logins.check(self.config.bootstrap_servers, self.config.security)
        await self._producers.replace(fenced)
        await self._pos.reread(self.consumer)
        # the stores catch up too: the changelog knows whether that transaction committed
        committed = {(t, p): off for (t, p), off in self._pos.committed.items()}
        self._pos.hold_back(self.consumer, self.stores.recovered(committed))
        self._broken = False
        self.observer.producer_reinitialised(cause)

    # --- what a sync asks of the consumer (tables: ``_state.Feed``) ----------------------

    def _caught_up(self, partition: tuple[str, int]) -> bool:
        consumer = self._consumer
        return consumer is not None and self._pos.caught_up(consumer, partition)

    def _throttle(self, partition: tuple[str, int], paused: bool) -> None:
        if self._consumer is not None:
            self._pos.throttle(self._consumer, partition, paused)

    # --- rebalances (called by the listener) ----------------------------------------

    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        async with self._lock:  # waits for an EndTxn in flight and the post-commit delay
            txn, incremental = self._txn, self._group is not None and self._group.incremental
            consumed = (txn.consumed if txn else {}) if incremental else None  # else eager
            gone, moved = self._pos.revoke(revoked, consumed)
            if moved:
                self.doom(AbortReason.REVOKED, "partitions revoked")
            self.stores.revoked((tp.topic, tp.partition) for tp in gone)
            if gone:
                self.observer.partitions_revoked(frozenset((tp.topic, tp.partition) for tp in gone))
        if self._on_revoked is not None and revoked:
            await self._on_revoked(frozenset((tp.topic, tp.partition) for tp in revoked))

    def _failed(self, exc: Exception) -> None:
        """The membership failed, or could not set up new partitions: the next ``poll``
        raises it (a partition without its committed offset must not silently stall). A
        failure after the consumer's close is none: nothing polls that consumer again."""
        if self._consumer is None:
            return
        log.error("group membership failed: %r", exc)
        why = f"positioning newly assigned partitions failed: {exc}"
        self._failure = exc if isinstance(exc, MembershipStopped) else FatalError(why)

    def _restore_failed(self, exc: Exception) -> None:
        """A store restore failed for good: the next ``poll`` raises it."""
        if self._consumer is None:
            return
        self._failure = exc if isinstance(exc, FatalError) else FatalError(str(exc))

    def _restored(self, partition: tuple[str, int]) -> None:
        """A held-back partition's stores are restored: it is processed from now on."""
        if self._consumer is not None and self._pos.release(self.consumer, partition):
            log.info("stores of %s[%d] ready", *partition)

    async def _assigned(self, assigned: set[TopicPartition]) -> None:
        g, hold = self._group, self.stores.assigned
        assert g is not None
        new = await self._pos.take(self.consumer, assigned, hold, g.identity(), g.incremental)
        if not new:
            return
        log.info("assigned %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in new))
        partitions = frozenset((tp.topic, tp.partition) for tp in new)
        self.observer.partitions_assigned(partitions)
        if self._on_assigned is not None:
            await self._on_assigned(partitions)


def _held(
    folded: Collection[str],
    held: dict[tuple[str, int | None, object], Output],
    outputs: Sequence[Output],
) -> Sequence[Output]:
    """``outputs`` but those of ``folded`` topics with a key, which go into ``held``:
    the last per (topic, partition, key), a later one taking an earlier one's place."""
    now: list[Output] = []
    for o in outputs:
        key = o.key
        if key is not None and o.topic in folded:
            held[(o.topic, o.partition, key)] = o
        else:
            now.append(o)
    return now if len(now) < len(outputs) else outputs
