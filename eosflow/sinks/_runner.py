"""``SinkRunner``: the runtime of a ``PostgresSink`` -- the group consumer, one database
connection, and the cycle: collect a batch, write it with its positions in one database
transaction, then tell Kafka. The Kafka transaction engine (``_engine``) is not used:
the database transaction is the unit of atomicity.

Outcomes, each explicit:

- committed: the rows and the positions are in the database; the group's offsets are
  committed to Kafka afterwards, best effort (lag and status only);
- aborted: nothing written. The partitions another instance claimed meanwhile
  (``PartitionLost``) are let go; the rest go back to their positions in the database;
- unknown (the connection lost during COMMIT, the database killed): the connection is
  made again and every held partition's position read back from the database, which
  says what committed; the ones whose epoch moved are let go.

Failures of the database or the broker are retried with a growing backoff; once they
outlast ``retry_timeout_s`` without a commit the app stops with the last cause
(``FatalError``), never silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import ConfigError, EosflowError, FatalError, TransientError
from .._observe import AbortReason, Observer, Outcome, TransactionReport
from .._records import Partition, PartitionOffsets, Record, StateNow, lag_of
from .._timeouts import within
from ._connection import Database
from ._errors import DRIVER_ERRORS
from ._offsets import OffsetsTable, PartitionClaim, PartitionLost
from ._postgres import PostgresSink
from ._retries import Retries

log = logging.getLogger("eosflow.sink")


@contextlib.contextmanager
def _user_code(what: str) -> Iterator[None]:
    """A sink's own code: its database errors go to the mapping around it, eosflow's
    pass, anything else is a bug of the sink -- ``FatalError`` naming ``what``."""
    try:
        yield
    except (*DRIVER_ERRORS, EosflowError):
        raise
    except Exception as exc:
        raise FatalError(f"{what} raised {type(exc).__name__}: {exc}") from exc


PartitionsCall = Callable[[frozenset[Partition]], Awaitable[None]]


class SinkRunner:
    """Run ``sink`` under ``config`` until ``stopping`` is set (see the module)."""

    def __init__(
        self,
        sink: PostgresSink,
        config: EosConfig,
        observer: Observer,
        stopping: asyncio.Event,
        on_assigned: PartitionsCall,
        on_revoked: PartitionsCall,
    ) -> None:
        if config.group_protocol == "consumer":
            raise ConfigError(
                "a PostgresSink runs the classic group protocol: set group_protocol "
                "to classic or auto"
            )
        self.sink, self.config, self.observer = sink, config, observer
        self._stopping = stopping
        self._on_assigned, self._on_revoked = on_assigned, on_revoked
        self._retries = Retries(config)
        self.db = Database(sink.database(), config, self._retries)
        self.offsets = OffsetsTable(sink.offsets_table, config.group_id)
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()  # one database transaction at a time
        self._held: dict[Partition, PartitionClaim] = {}  # claimed, with the position written
        self._generation = 0  # moves with every assignment change: older batches are void
        self._failure: BaseException | None = None
        self.in_transaction = False
        self._in_flight: dict[Partition, int] | None = None  # a write's ends, while it runs
        self._untold: dict[Partition, int] = {}  # positions written, not yet in Kafka
        self._owed: set[Partition] = set()  # held, with a write that failed: comes again
        # when the batch being collected got its first records (monotonic, wall clock):
        # its transaction's start, as the engine's begins with its first record
        self._first_polled: tuple[float, float] | None = None
        self.last_outcome: Outcome | None = None

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, make or check the offsets table, run the sink's ``prepare`` --
        retried together for ``retry_timeout_s`` (each in its own transaction, so a
        retry starts clean; a refused login or a wrong table is a ``ConfigError`` at
        once) -- then join the group."""
        deadline = time.monotonic() + self.config.retry_timeout_s
        while True:
            try:
                await self._prepared(max(0.1, deadline - time.monotonic()))
                break
            except TransientError as exc:
                if self._retries.too_late(deadline):
                    raise FatalError(f"{exc} (for {self.config.retry_timeout_s:g} s)") from exc
                log.warning("%s; retrying", exc)
                await self._retries.sleep()
        self._retries.went_right()  # the backoff starts afresh
        consumer = ak.consumer_for(self.config, self._revoked, self._assigned, self._failed)
        self._consumer = consumer
        await ak.start(consumer, self.config, "joining the group", "READ")

    async def _prepared(self, budget_s: float) -> None:
        step = f"connecting to {self.db.redacted()}"
        conn = await self.db.connected(step, budget_s)
        with self.db.step(f"making the offsets table {self.offsets.table}"):
            await self.offsets.ensure(conn)
        name = type(self.sink).__name__
        with self.db.step(f"{name}.prepare"), _user_code(f"{name}.prepare"):
            async with conn.transaction():  # one instance at a time (its DDL)
                lock = "SELECT pg_advisory_xact_lock(hashtext($1))"
                await conn.execute(lock, f"eosflow prepare {name}")
                await self.sink.prepare(conn)

    async def stop(self) -> None:
        """Leave the group and close the connection; never raises for the broker's or the
        database's sake."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await ak.close_consumer(consumer, timeout_s=10.0)
        await self.db.close()

    def state_now(self) -> StateNow:
        return StateNow([], [])  # a sink keeps no state of its own

    def partition_offsets(self) -> dict[Partition, PartitionOffsets]:
        """Each held partition's database position (as ``committed``), consumer position,
        last stable offset (as the last fetch answer gave it) and lag (``lag_of``, from
        the database's position; pending while a failed write is owed or records were
        read past it); partitions not fetched yet are left out."""
        consumer = self._consumer
        if consumer is None:
            return {}
        out: dict[Partition, PartitionOffsets] = {}
        for tp, claim in self._held.items():
            ends = ak.log_position(consumer, TopicPartition(*tp))
            at = claim.next_offset
            if ends is None or at is None:
                continue
            stable, position = ends
            pending = tp in self._owed or (position is not None and at < position)
            out[tp] = PartitionOffsets(at, position, stable, lag_of(stable, position, at, pending))
        return out

    @property
    def reader(self) -> None:
        return None  # a sink keeps no state to query: its table is the database's

    async def abort_on(self, exc: BaseException) -> None:
        """The app is ending on ``exc``: a write in flight was rolled back by its own
        transaction block, unless it was in COMMIT -- read back, as after a cancel."""
        await self.end_on_cancel()

    async def end_on_cancel(self) -> None:
        """A cancelled write transaction: rolled back, or -- cancelled in COMMIT --
        committed; the database says which (``last_outcome``: COMMITTED or ABORTED, or
        None when it cannot be reached: the next instance reads it back anyway)."""
        ends, self._in_flight = self._in_flight, None
        if ends is None:
            return
        self.in_transaction = False
        await self.db.close()
        try:
            conn = await self.db.connected("reading positions back")
            with self.db.step("reading positions back"):
                now = await self.offsets.read(conn, list(ends))
        except EosflowError as exc:
            log.warning("the last write's outcome is unknown (%s)", exc)
            self.last_outcome = None
            return
        done = all(c is not None and c.next_offset == ends[tp] for tp, c in now.items())
        self.last_outcome = Outcome.COMMITTED if done and now else Outcome.ABORTED

    # --- the cycle ----------------------------------------------------------------------

    async def run(self) -> None:
        """Collect and write batches until stopped; a stop writes what was collected.
        A success for the failure clock (``Retries``) is a commit, or -- when no failed
        write is owed (``_owed``: its records come again after the rewind) -- a poll that
        found nothing: an empty poll right after a rewind must not pass for a database
        that works."""
        while True:
            stopping = self._stopping.is_set()
            batch, polled, generation = await self._collect(stopping)
            if batch:
                await self._write(batch, generation)
            if stopping:
                return  # one last poll's records written: never a chase of live input
            if not batch and polled and not self._owed:
                self._retries.went_right()  # a poll without a failure, and nothing owed
                if self._untold:
                    await self._tell_kafka({})
            self._retries.give_up_if_stuck()

    async def _collect(self, stopping: bool) -> tuple[list[Record], bool, int]:
        """Records for one batch, whether every poll succeeded, and the generation they
        were polled in: polled until
        ``max_records_per_txn``, ``max_bytes_per_txn`` (keys and values) or
        ``commit_interval_s`` (or one poll when stopping) -- what one eosflow
        transaction would hold. A rebalance while polling voids what was polled (the
        positions are rewound, so it comes again)."""
        if self._failure is not None:
            raise self._failure
        consumer, cfg = self._consumer, self.config
        assert consumer is not None
        generation, out = self._generation, list[Record]()
        self._first_polled = None
        deadline = time.monotonic() + cfg.commit_interval_s
        size, cap = 0, cfg.max_bytes_per_txn
        while len(out) < cfg.max_records_per_txn and (cap is None or size < cap):
            left = 0.0 if stopping else max(0.0, deadline - time.monotonic())
            try:
                with ak.mapped("consuming", "READ"):
                    polled = await ak.poll(consumer, left, cfg.max_records_per_txn - len(out))
            except TransientError as exc:  # (its group handling over: a FatalError)
                log.warning("%s; retrying", exc)
                self._retries.went_wrong(exc)
                await self._retries.sleep()
                return out, False, generation
            if self._generation != generation:
                async with self._lock:
                    await self._rewind()
                return [], True, generation
            if polled and self._first_polled is None:
                self._first_polled = (time.monotonic(), time.time())
            for records in polled.values():
                out.extend(records)
                if cap is not None:
                    size += sum(len(r.key or b"") + len(r.value or b"") for r in records)
            if left <= 0 or self._stopping.is_set():
                break
        return out, True, generation

    def _taken(self, batch: list[Record]) -> tuple[list[Record], dict[Partition, int]]:
        """The records of ``batch`` to write, and each partition's position after them:
        only held partitions, each record past the last one taken (never twice)."""
        ends: dict[Partition, int] = {}
        kept: list[Record] = []
        for r in batch:
            tp = (r.topic, r.partition)
            held = self._held.get(tp)
            if held is None:
                continue
            after = ends.get(tp, held.next_offset)
            if after is not None and r.offset < after:
                continue
            kept.append(r)
            ends[tp] = r.offset + 1
        return kept, ends

    async def _write(self, batch: list[Record], generation: int) -> None:
        async with self._lock:
            if self._generation != generation:  # a rebalance after its last poll
                await self._rewind()
                return
            kept, ends = self._taken(batch)
            if not kept:
                return
            began, began_at = self._first_polled or (time.monotonic(), time.time())
            claims = {tp: self._held[tp] for tp in ends}
            self.in_transaction, self._in_flight = True, ends
            try:
                await self._transaction(claims, kept, ends)
            except PartitionLost as lost:
                self.in_transaction, self._in_flight = False, None
                self._held.update(lost.moved)  # still ours, at the database's position
                self._owed.difference_update(lost.moved)  # written, as the database says
                await self._let_go(lost.partitions, "claimed by another instance")
                await self._rewind()
                self._report(Outcome.ABORTED, AbortReason.REVOKED, str(lost), kept, began, began_at)
                return
            except TransientError as exc:
                self.in_transaction, self._in_flight = False, None
                log.warning("writing a batch failed (%s); reading positions back", exc)
                self._retries.went_wrong(exc)
                self._owed.update(ends)
                outcome = await self._recover(ends)
                why = AbortReason.DATABASE_ERROR  # ``_transaction`` touches only the database
                self._report(outcome, why, str(exc), kept, began, began_at)
                return
            # anything else (a cancel, the processor's error) leaves ``_in_flight`` for
            # ``end_on_cancel``: it was rolled back, unless it ended in COMMIT
            self.in_transaction, self._in_flight = False, None
            for tp, end in ends.items():
                self._held[tp] = PartitionClaim(end, claims[tp].epoch)
            self._owed.clear()  # the database works again
            self._retries.went_right()
            self._report(Outcome.COMMITTED, None, None, kept, began, began_at)
        await self._tell_kafka(ends)

    async def _transaction(
        self,
        held: Mapping[Partition, PartitionClaim],
        records: list[Record],
        ends: Mapping[Partition, int],
    ) -> None:
        """One database transaction: the claims checked (rows locked), the rows written,
        the positions moved, COMMIT."""
        conn = await self.db.connected("connecting again")
        with self.db.step("writing a batch"):
            async with conn.transaction():
                await self.offsets.check(conn, held)
                with _user_code(f"{type(self.sink).__name__}.write"):
                    await self.sink.write(conn, records)
                await self.offsets.advance(conn, ends)

    async def _recover(self, ends: Mapping[Partition, int]) -> Outcome:
        """After a failure of unknown outcome: connect again and read every held
        partition back. Returns RECOVERED when the batch turned out committed, else
        ABORTED. A database still gone leaves the positions as they were: the next
        write's check finds out (``PartitionLost.moved``)."""
        await self._retries.sleep()
        try:
            conn = await self.db.connected("connecting again")
            with self.db.step("reading positions back"):
                now = await self.offsets.read(conn, list(self._held))
        except TransientError as exc:
            log.warning("%s; retrying", exc)
            await self._rewind()
            return Outcome.ABORTED
        committed = all(
            now.get(tp) == PartitionClaim(end, self._held[tp].epoch) for tp, end in ends.items()
        )
        gone = [tp for tp, claim in self._held.items() if now.get(tp, claim).epoch != claim.epoch]
        for tp, claim in now.items():
            if tp not in gone and tp in self._held:
                self._held[tp] = claim
        if gone:
            await self._let_go(gone, "claimed by another instance")
        await self._rewind()
        if not committed:
            return Outcome.ABORTED
        self._owed.difference_update(ends)  # it committed: nothing of it comes again
        self._retries.went_right()
        return Outcome.RECOVERED

    async def _tell_kafka(self, ends: Mapping[Partition, int]) -> None:
        """The group's offsets in Kafka follow the database's (for lag and status only):
        a failure is logged, never raised -- the database is the truth -- and what was
        not told is told again with the next batch, or when the input is idle. Bounded
        by the transaction timeout, so that a broker outage does not hold the cycle."""
        self._untold.update(ends)
        consumer = self._consumer
        told = {tp: o for tp, o in self._untold.items() if tp in self._held}
        self._untold = dict(told)
        if consumer is None or not told:
            return
        try:
            offsets = {TopicPartition(*tp): o for tp, o in told.items()}
            await within(ak.commit_offsets(consumer, offsets), self.config.transaction_timeout_s)
        except (EosflowError, TimeoutError) as exc:
            log.info("committing offsets to Kafka failed (the database has them): %r", exc)
            return
        for tp, o in told.items():
            if self._untold.get(tp) == o:
                del self._untold[tp]

    # --- rebalances (aiokafka's listener) -----------------------------------------------

    async def _assigned(self, assigned: set[TopicPartition]) -> None:
        """Claim the new partitions in the database (retried for ``retry_timeout_s``;
        then the app stops) and position them where it says."""
        async with self._lock:
            self._generation += 1
            new = [(tp.topic, tp.partition) for tp in assigned]
            if not new:
                return
            try:
                claims = await self._claim(new)
            except EosflowError as exc:
                self._failed(exc)
                return
            self._held.update(claims)
            # Kafka's offsets may lag the database's (a commit to Kafka lost in a
            # rebalance): told from here, so lag reaches 0 with nothing left to write
            self._untold.update(
                {tp: c.next_offset for tp, c in claims.items() if c.next_offset is not None}
            )
            await self._rewind()
            if self._consumer is not None:  # one let go earlier may come back
                ak.resume(self._consumer, [TopicPartition(*tp) for tp in claims])
            # again: a collect begun while the claim was in the database (its polls read
            # from aiokafka's own positions, before the seek) is void too
            self._generation += 1
        log.info("assigned %s", sorted(f"{t}[{p}]" for t, p in new))
        self.observer.partitions_assigned(frozenset(new))  # (metrics, the console)
        await self._on_assigned(frozenset(new))

    async def _claim(self, new: list[Partition]) -> dict[Partition, PartitionClaim]:
        consumer = self._consumer
        assert consumer is not None
        deadline = time.monotonic() + self.config.retry_timeout_s
        while True:
            try:
                tps = [TopicPartition(*tp) for tp in new]
                with ak.mapped("finding where new partitions start", "READ"):
                    cfg = self.config
                    reset = await ak.log_offsets(
                        consumer, tps, cfg.auto_offset_reset, cfg.transaction_timeout_s
                    )
                conn = await self.db.connected("claiming partitions")
                with self.db.step("claiming partitions"):
                    return await self.offsets.claim(
                        conn, {(tp.topic, tp.partition): o for tp, o in reset.items()}
                    )
            except TransientError as exc:
                if self._retries.too_late(deadline):
                    raise FatalError(f"claiming partitions: {exc}") from exc
                log.warning("claiming partitions: %s; retrying", exc)
                await self._retries.sleep()

    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        async with self._lock:  # waits for a write transaction in flight
            self._generation += 1
            gone = frozenset((tp.topic, tp.partition) for tp in revoked)
            for tp in gone:
                self._held.pop(tp, None)
            self._owed -= gone  # another instance writes them now
        if gone:
            self.observer.partitions_revoked(gone)
            await self._on_revoked(gone)

    def _failed(self, exc: Exception) -> None:
        log.error("group membership failed: %r", exc)
        self._failure = exc if isinstance(exc, EosflowError) else FatalError(str(exc))

    async def _let_go(self, partitions: frozenset[Partition] | list[Partition], why: str) -> None:
        """Stop writing ``partitions`` (another instance claimed them): paused until the
        group takes them away, as it will, or gives them back (claimed again)."""
        if not partitions:
            return
        log.warning("letting go of %s: %s", sorted(f"{t}[{p}]" for t, p in partitions), why)
        self._generation += 1
        for tp in partitions:
            self._held.pop(tp, None)
        self._owed.difference_update(partitions)
        if self._consumer is not None:
            ak.pause(self._consumer, [TopicPartition(*tp) for tp in partitions])

    async def _rewind(self) -> None:
        """Every held partition to the position the database gave it: what was polled
        past it and not written comes again."""
        consumer = self._consumer
        assert consumer is not None
        for (topic, partition), claim in self._held.items():
            if claim.next_offset is not None:
                ak.seek(consumer, TopicPartition(topic, partition), claim.next_offset)

    def _report(
        self,
        outcome: Outcome,
        reason: AbortReason | None,
        detail: str | None,
        records: list[Record],
        began: float,
        began_at: float,
    ) -> None:
        self.last_outcome = outcome
        parts = tuple(sorted({(r.topic, r.partition) for r in records}))
        self.observer.transaction_ended(
            TransactionReport(
                outcome,
                reason,
                detail,
                len(records),
                len(records) if outcome is Outcome.COMMITTED else 0,
                0,
                began,
                began_at,
                time.monotonic(),
                partitions=parts,
            )
        )
