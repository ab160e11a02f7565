"""``Engine``: the one owner of the transaction cycle -- begin, poll, process, send,
commit -- for one app, on its ``TransactSession``.

One transaction spans at most ``commit_interval_s`` (from its first record),
``max_records_per_txn`` records or ``max_bytes_per_txn`` bytes (where the app works ahead,
twice the defaults of those unset), and ends sooner once its input has caught up. It
begins lazily when records arrive, so an idle app opens no transactions.

Pipelining (``process_ahead``; by default on where the app keeps state -- stores,
windows, timers or tables, a pipeline's stages' included -- and off for a stateless app):
while one transaction commits, the next records are polled and processed, their outputs
held back (aiokafka runs one transaction at a time). The next transaction adopts that
work only if the commit succeeded and no partition came or went meanwhile; otherwise it
is dropped (an observer event, ``work_dropped``) and its partitions put back at their
committed offsets. It overlaps processing with the commit's round trips, at the price of
a second transaction's records and outputs held (5-12 MiB more at 20,000 records of
100 B; such an app's unset caps are twice their defaults, ``_sizing``). Measured on genuine
Kafka 4.4.0 on 2 shared cores (``benchmarks/README.md``), a stateful app's commit --
changelog, local store, and for a pipeline twice the records -- left the serial loop's
CPU idle long enough that working ahead made a count and a window 1.13x, a regroup
1.14x and a join 1.10x as fast (medians of 3 alternating pairs); a stateless copy was
no faster, so it stays serial.

Errors: a processor exception aborts the transaction (nothing past the failing record is
committed) and ends ``run()`` with ``ProcessingError`` (a ``FatalError``: with itself,
always), unless ``dead_letter_topic`` is set: then the failing record (per record for
``process``, the whole batch for ``process_batch``) goes to that topic with error headers
inside the same transaction and processing goes on. A broker failure aborts the transaction, and
the cycle goes on after a backoff (``_failures``) until failures outlast
``retry_timeout_s``. A processor's ``TransactionError`` aborts and retries with at most
half the records (``shrink=False``: as many). A fenced producer: ``ProducerFencedError``.

Cancellation: ``end_on_cancel`` ends the open transaction explicitly -- aborted if it was
still being filled, or the in-flight ``end`` is finished (committed, aborted or
unknown-then-recovered) -- and records the outcome in ``last_outcome``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from .._config import EosConfig
from .._errors import (
    DecodeError,
    FatalError,
    ProcessingError,
    TransactionError,
    TransientError,
)
from .._native import AWAIT, END, RAISED, STOP, UNSTARTED, YIELD, drive, mark_runs, resumed
from .._observe import AbortReason, Outcome
from .._processor import Processor, as_outputs, normalised, overrides_batch
from .._records import Output, Partition, PartitionOffsets, Record, StateNow
from .._state import Seat, Timer, copartitioned, declared, declared_tables
from .._typed import Typing
from ._failures import Failures, dead_letter
from ._session import PartitionsHook, TransactSession
from ._sizing import Sizing, batch_bytes
from ._work import Work

log = logging.getLogger("eosflow.app")
# While a commit is in flight and the consumer has nothing buffered, look again this
# often (aiokafka's getmany is not safe to cancel: it would leave its poll counter raised).
_IDLE_WAIT_S = 0.005
# An idle app's poll waits at most this long for records, so a stop (read between polls)
# is seen within it whatever commit_interval_s is; records cut the wait short.
_IDLE_POLL_S = 0.5
_YIELD_S = 0.0005
"""Processing yields to the event loop at least this often, so that each step of a
commit in flight (flush, offsets, heartbeat, EndTxn), the fetcher and the sender go on
while records are processed: a step waits at most this long for its turn. By time, not
by record count: a yield costs ~3.5 us, which every 16 records (the old rule) was a
fifth of a pass-through's loop; every 0.5 ms it is under 1%."""


class Engine:
    """The transaction cycle of ``processor`` under ``config``, told to the observer of
    its ``seat`` (the app's: where the processor finds what the runtime gives it).
    ``run()`` turns it until ``stopping`` is set (a stop: the open transaction commits)
    or an error no retry fixes; ``session`` is its ``TransactSession`` (started and
    stopped by the app around ``run()``)."""

    def __init__(
        self,
        processor: Processor,
        seat: Seat,
        config: EosConfig,
        stopping: asyncio.Event,
        on_assigned: PartitionsHook,
        on_revoked: PartitionsHook,
    ) -> None:
        self.processor = processor
        self._seat = seat
        self.config = config
        self.observers = observers = seat.observer
        tables = declared_tables(processor, config.input_topics)
        # typed records (``_typed``): declared inputs decoded first -- the stores'
        # wrappers, windows and timers see what ``process`` sees -- and outputs encoded
        # by their topic's declaration where they are not bytes; tables' and stores' registry
        # schemas bound to the app's registry (``typed.tables``, ``typed.stores``: what the
        # stores read and write with)
        name, inputs = type(processor).__name__, config.input_topics
        registry = processor.schema_registry
        stores, group = declared(processor), config.group_id
        typed = Typing(name, processor.topics, inputs, tables, registry, stores=stores, group=group)
        self._typed = typed
        # The processing strategy, picked once: per record as records arrive (stream), or
        # the whole transaction in one process_batch call (batch engines such as Spark).
        # Both fill the transaction through one loop (_fill) and share the error policy.
        batch = overrides_batch(processor)
        ahead = config.process_ahead  # None: where the app keeps state (the module's doc)
        self._works_ahead = (bool(stores or tables) if ahead is None else ahead) and not batch
        self.session = TransactSession(
            config,
            on_assigned,
            on_revoked,
            typed.stores,
            observers,
            typed.tables,
            copartitioned(processor),
            batch_bytes(config, self._works_ahead),
        )
        self.session.folded = frozenset(typed.folded)  # outputs folded per key (Topic.fold)
        self.last_outcome: Outcome | None = None
        self._stopping = stopping
        self._ending: asyncio.Task[Outcome] | None = None
        self._ahead: Work | None = None  # adopted by the next transaction
        self._held = 0  # records taken into the open transaction so far (``_fill``)
        self._failures = Failures(config)
        self._fill_transaction = self._batch_transaction if batch else self._stream_transaction
        self._sizing = Sizing(config, self._works_ahead)  # poll sizes, caps, the record limit
        # with state: bound by the session's stores (state() then knows the partition);
        # typed records decoded before them (``typed``)
        checked = (
            functools.partial(as_outputs, encode=typed.encode) if typed.encodes else as_outputs
        )
        # a pipeline's (``Seat.route``): what a stage returned routed first, wherever a
        # result is checked (its stage's process runs without a frame of its own)
        self._route = route = seat.route
        self._check = checked if route is None else lambda result: checked(route(result))
        self._checked = checked  # a result already routed (``_process``)
        self._encode = typed.encode if typed.encodes else normalised  # an Output's to bytes
        self._process_record: Callable[[Record], Awaitable[object]] = typed.decoding(
            self.session.stores.bind(seat, self._check)
        )
        self._enter = self.session.stores.entering  # a stateful app's: per run (drive)

    def before_join(self, make: Callable[[Any, int, float], Awaitable[None]]) -> None:
        """``make(producer, replication, timeout_s)`` is awaited at each start of the
        session, once its producer started and before the stores and the group: the
        topics the app makes for itself (a pipeline's repartition topics)."""
        cfg = self.config
        replication, timeout = cfg.changelog_replication_factor, cfg.transaction_timeout_s

        async def prepare(producer: Any) -> None:
            await make(producer, replication, timeout)

        self.session.prepare = prepare

    def after_commit(self, told: Callable[[Any, Mapping[tuple[str, int], int]], None]) -> None:
        """``told(producer, offsets)`` after each commit, with the offsets it committed
        (the next to read, per partition), under the session lock: it must not block
        (a pipeline starts trimming its repartition topics there)."""
        self.session.committed_hook = told

    @property
    def in_transaction(self) -> bool:
        return self.session.in_transaction

    async def start(self) -> None:
        await self._typed.prepare()  # outputs' schemas registered before joining the group
        await self.session.start()

    async def stop(self) -> None:
        try:
            await self.session.stop()
        finally:
            await self._typed.close()

    def partition_offsets(self) -> dict[Partition, PartitionOffsets]:
        return self.session.partition_offsets()

    def state_now(self) -> StateNow:
        return self.session.state_now()

    @property
    def reader(self) -> Callable[[str, bytes], Any]:
        """What answers state queries: the stores' committed copies."""
        return self.session.stores.read_committed

    async def run(self) -> None:
        """Transactions one after the other until stopped. A broker failure met by a
        poll, a begin or a recovery waits out its backoff (``_failures``) and goes on."""
        session = self.session
        while not self._stopping.is_set():
            try:
                await self._one_transaction(session)
            except TransientError as exc:
                await self._failures.failed(str(exc), exc, self._stopping)

    async def abort_on(self, exc: BaseException) -> None:
        """The app is ending on ``exc``: abort the open transaction, if one is, for the
        reason ``exc`` gives (never raises: the app reports ``exc`` itself)."""
        if not self.session.in_transaction:
            return
        why = (
            AbortReason.PROCESSING_ERROR
            if isinstance(exc, ProcessingError)
            else AbortReason.STOPPED
        )
        with contextlib.suppress(Exception):
            self.last_outcome = await self.session.end(False, why, str(exc))

    async def end_on_cancel(self) -> None:
        await self._end_on_cancel(self.session)

    # --- the cycle --------------------------------------------------------------------

    async def _one_transaction(self, session: TransactSession) -> None:
        cfg = self.config
        sizing = self._sizing
        limit = sizing.limit
        ahead, self._ahead = self._ahead, None
        if session.broken:
            # A recovery that did not finish goes on now, on the cycle's own clock and
            # its backoff (``run``), not when the next record comes: its records were
            # polled already, and an idle input brings no other. It puts every partition
            # back at its committed offset, so work ahead is redone.
            if ahead is not None:
                self.observers.work_dropped(len(ahead.records))
                ahead = None
            await session.recover()
        if ahead is not None:
            records, epoch = ahead.pending, ahead.epoch
        else:
            first = sizing.chunk(sizing.room(limit, 0), cfg.commit_interval_s)
            records = await session.poll(first, min(cfg.commit_interval_s, _IDLE_POLL_S))
            epoch = session.epoch  # the assignment these records were polled under
            if not records and not session.stores.clock_due():
                return  # idle (a wall-clock timer due opens a transaction of its own)
        await session.begin(epoch, adopted=ahead is not None)
        try:
            if records or ahead is not None:
                await self._fill_transaction(session, records, session.deadline, limit, ahead)
            await self._fire_clock(session)
        except TransientError as exc:  # a poll met a broker failure: abort, try again
            session.doom(AbortReason.BROKER_ERROR, str(exc))
        except TransactionError as exc:  # retriable: abort, rewind, try again smaller
            self._retry_smaller(exc, self._held)
            session.doom(AbortReason.PROCESSING_ERROR, str(exc))
        session.seal()  # store writes from here on are work done ahead
        # the app's last transaction (its stop asked before a recovery starts) is not
        # recovered: the app is about to close its clients
        last = self._stopping.is_set
        ending = self._ending = asyncio.ensure_future(session.end(commit=True, last=last))
        failure: Exception | None = None
        try:
            ahead = await self._work_ahead(session, ending, limit)
        except Exception as exc:  # raised once the transaction in flight has ended
            ahead, failure = None, exc
        try:
            outcome = await asyncio.shield(ending)
        except TransientError as exc:  # the outcome unknown, and recovery did not finish
            if ahead is not None:  # the next begin recovers and rewinds: redone
                self.observers.work_dropped(len(ahead.records))
            if last():
                raise FatalError(
                    "stopped with the last transaction not ended (the broker did not answer; "
                    "the warning above says where): not committed unless its EndTxn reached "
                    "the broker, which aborts one left open once transaction_timeout_s "
                    "passes; the next instance resumes from the committed offsets either way"
                ) from exc
            raise
        finally:
            if ending.done():  # a cancellation leaves it to _end_on_cancel to finish
                self._ending = None
        self.last_outcome = outcome
        if failure is not None:
            raise failure
        if outcome is Outcome.COMMITTED:
            self._failures.reset()
            sizing.committed()
        elif outcome is not Outcome.EMPTY:
            reason = session.last_failure_reason or outcome.value
            await self._failures.failed(reason, None, self._stopping)
        if ahead is None:
            return
        committed = outcome is Outcome.COMMITTED
        adopt = ahead.epoch == session.epoch and ahead.failed is None
        if committed and adopt and not self._stopping.is_set():
            self._ahead = ahead
            return
        self.observers.work_dropped(len(ahead.records))
        await session.reposition(ahead.records + ahead.pending, committed)
        if ahead.failed is not None:
            if not isinstance(ahead.failed, TransientError):  # the processor asked
                self._retry_smaller(ahead.failed, len(ahead.records) + len(ahead.pending))
            if committed:  # (a failed commit was counted as the failure already)
                await self._failures.failed(str(ahead.failed), ahead.failed, self._stopping)

    async def _work_ahead(
        self, session: TransactSession, ending: asyncio.Task[Outcome], limit: int
    ) -> Work | None:
        """While ``ending`` commits, poll what the consumer has buffered and process it
        into outputs held back for the next transaction (aiokafka runs one transaction
        at a time, so nothing is sent yet). Stops when ``ending`` is done, at the record
        or byte limit, or when stopping; records polled but not yet processed then stay
        pending. The next transaction adopts all this only if ``ending`` committed and no
        rebalance happened meanwhile; otherwise it is dropped and repositioned."""
        if not self._works_ahead or self._stopping.is_set():
            return None
        ahead = Work(epoch=session.epoch)
        sizing = self._sizing
        while not ending.done() and len(ahead.records) < limit and not sizing.full(ahead.size):
            try:
                records = await session.poll(sizing.room(limit - len(ahead.records), ahead.size), 0)
            except TransientError as exc:  # what was polled ahead is put back, not lost
                ahead.failed = exc
                break
            if not records:
                await asyncio.wait([ending], timeout=_IDLE_WAIT_S)
                continue
            try:
                done = await self._process(records, ahead, _NEVER, ending)
            except TransactionError as exc:  # nothing of this work is adopted: redone
                ahead.failed, ahead.pending = exc, records
                break
            if done < len(records):
                ahead.pending = records[done:]
                break
        return ahead if ahead.records or ahead.pending else None

    async def _fire_clock(self, session: TransactSession) -> None:
        """The wall-clock timers due now (``eosflow/_state/_timers.py``), fired into the
        open transaction at its end: per ready partition, its committed offset committed
        again with them (``touch``: a zombie's commit refused; the changelog gets their
        writes, the offset's metadata names them); a partition whose assignment moved,
        or with no committed offset, waits. At most
        the transaction's record limit fire; the rest in the next transaction."""
        stores, room = session.stores, self._sizing.limit
        for partition in stores.clock_due():
            if room > 0 and session.touch(partition):
                outputs, fired = await stores.fire_clock(
                    partition, self._check, self._timer_failed, room
                )
                room -= fired
                await session.send_all(outputs)

    def _timer_failed(
        self, partition: tuple[str, int], timer: Timer, exc: Exception
    ) -> list[Output]:
        """A wall-clock timer's ``fire`` raised: without a dead-letter topic the app stops
        (``ProcessingError``); with one the timer is dead-lettered (its key and payload,
        offset -1) and dropped."""
        topic, p = partition
        if self.config.dead_letter_topic is None:
            log.error(
                "processor failed firing the timer of %r on %s[%d]: %r", timer.key, topic, p, exc
            )
            raise ProcessingError(topic, p, -1, exc, timer=timer.key) from exc
        log.warning("dead-lettering the timer of %r on %s[%d]: %r", timer.key, topic, p, exc)
        record = Record(topic, p, -1, timer.key, timer.payload, (), timer.time_ms)
        return [dead_letter(record, exc, self.config.dead_letter_topic)]

    async def _send(self, session: TransactSession, work: Work) -> None:
        """Put ``work`` into the open transaction: outputs produced, offsets marked."""
        await session.send_all(work.outputs)
        session.mark_consumed(work.offsets, len(work.records), work.dead_lettered, work.undecodable)

    async def _fill(
        self,
        session: TransactSession,
        records: list[Record],
        deadline: float,
        limit: int,
        taken: tuple[int, int],
        take: Callable[[list[Record]], Awaitable[tuple[int, int]]],
        poll_size: Callable[[int, float], int],
        caught_up_end: float,
    ) -> None:
        """The one fill loop of a transaction, for both strategies: hand ``records``, then
        each further poll, to ``take`` until the deadline, the record limit, the byte
        limit, a stop -- or, from ``caught_up_end`` on, the consumer having caught up
        (nothing buffered: a record does not wait for the interval when nothing else
        will come; before ``caught_up_end`` the poll waits for input, which bounds the
        commit rate). ``taken`` is (records, bytes) already in the transaction; ``take``
        returns how many of the records it took and their bytes. One that took fewer is
        past the deadline: a transaction must not outgrow the commit interval, or it
        risks the transaction timeout, so the rest is given back for the next one."""
        count, size = taken
        while True:
            self._held = count + len(records)  # what a failure in ``take`` gave up
            done, nbytes = await take(records)
            count += done
            size += nbytes
            if done < len(records):
                session.give_back(records[done:])  # past the deadline: next transaction
                return
            remaining = deadline - time.monotonic()
            full = self._sizing.full(size)
            if remaining <= 0 or count >= limit or full or self._stopping.is_set():
                return
            wait = max(0.0, min(deadline, caught_up_end) - time.monotonic())
            records = await session.poll(
                poll_size(self._sizing.room(limit - count, size), remaining), wait
            )
            if not records:
                return

    async def _stream_transaction(
        self,
        session: TransactSession,
        records: list[Record],
        deadline: float,
        limit: int,
        ahead: Work | None,
    ) -> None:
        """Per-record processing as records arrive (after adopting the work done ahead),
        in chunks sized from the measured cost per record; each chunk's outputs are sent
        together and processing stops at the deadline."""
        taken = (0, 0)
        if ahead is not None:
            await self._send(session, ahead)  # adopt the work done ahead
            taken = (len(ahead.records), ahead.size)

        async def take(records: list[Record]) -> tuple[int, int]:
            started = time.monotonic()
            chunk = Work()
            done = await self._process(records, chunk, deadline)
            await self._send(session, chunk)
            self._sizing.processed(done, time.monotonic() - started)
            return done, chunk.size

        caught_up_end = session.opened + self.config.min_transaction_s
        chunk = self._sizing.chunk
        await self._fill(session, records, deadline, limit, taken, take, chunk, caught_up_end)

    async def _batch_transaction(
        self,
        session: TransactSession,
        records: list[Record],
        deadline: float,
        limit: int,
        ahead: Work | None,
    ) -> None:
        """Collect one transaction's records, then hand them to ``process_batch`` in one
        call: a batch engine pays per call, not per record (no work is done ahead)."""
        assert ahead is None
        batch: list[Record] = []

        async def take(records: list[Record]) -> tuple[int, int]:
            batch.extend(records)
            return len(records), self._sizing.count(records)

        # a batch engine pays per call: its transactions fill to the interval
        await self._fill(session, records, deadline, limit, (0, 0), take, _all_room, deadline)
        work = Work(records=batch, offsets={(r.topic, r.partition): r.offset + 1 for r in batch})
        # typed inputs decoded first, each that does not to the error policy on its own
        given, dead, failed = await self._typed.decode_batch(batch, self._failed)
        # with its stores and windows, if declared (the finals the batch closed follow);
        # a failing batch goes to the error policy (_failed), as written
        outputs, work.dead_lettered = await session.stores.run_batch(
            self._seat, given, self._check, failed
        )
        work.outputs, work.undecodable = dead + outputs, len(batch) - len(given)
        work.dead_lettered += work.undecodable
        await self._send(session, work)

    def _retry_smaller(self, exc: TransactionError, held: int) -> None:
        """The processor asked for a retry of a transaction that held ``held`` records:
        the next transactions hold at most half as many (none fewer for ``shrink=False``)."""
        if not exc.shrink:
            log.info("%s", exc)
            return
        limit = self._sizing.failed(held)
        log.error("%s; transaction aborted, retrying with at most %d records", exc, limit)

    async def _process(
        self,
        records: Sequence[Record],
        work: Work,
        deadline: float,
        ending: asyncio.Future[Outcome] | None = None,
    ) -> int:
        """Process ``records`` one by one into ``work`` until ``deadline`` (monotonic) or
        until ``ending`` is done, both asked from the second record on, so a slow record
        still makes progress; returns how many were processed. A processor error goes to
        ``_failed`` (dead letter or stop).

        The per-record path of every app: ``_native.drive`` runs records for as long as
        each one's coroutine finishes without suspending and gives an ``Output`` of bytes
        (or None) -- compiled, no ``await`` of ours. Here the rest: a coroutine that
        suspended (finished by ``resumed``), a result other than such an ``Output`` (one
        of objects encoded by its topic's declaration, ``Typing.encode``; others checked
        by ``as_outputs``; a pipeline's routed first, ``Seat.route``, in process), an
        error, and the yields to the event loop. Offsets are marked per run of records
        of one partition (``mark_runs``), not per record. The stores' ``idle`` says no
        record is in process -- before the loop yields, before a result other than an
        ``Output`` is read, and when the run ends -- for a join's record has no frame of
        its own that could (``Stores._bind``)."""
        process, check, encode = self._process_record, self._checked, self._encode
        route, enter = self._route, self._enter  # a pipeline's; a stateful app's
        idle = self.session.stores.idle  # no record in process: state() finds none
        outputs = work.outputs
        records = records if type(records) is list else list(records)
        yield_at = time.monotonic() + _YIELD_S
        done, n = 0, len(records)
        try:
            while done < n:
                done, why, got = drive(
                    records, done, process, route, enter, outputs, deadline, ending, yield_at
                )
                if why == YIELD:
                    idle()  # other tasks run now
                    await asyncio.sleep(0)
                    yield_at = time.monotonic() + _YIELD_S
                    continue
                if why == END or why == STOP:
                    break
                try:  # records[done]: what drive left to us
                    if why == RAISED:
                        raise got
                    result = got
                    if why == AWAIT:
                        aw, yielded = got
                        result = await (aw if yielded is UNSTARTED else resumed(aw, yielded))
                        if route is not None and type(result) is not Output:
                            result = route(result)  # read in process, as the stage's frame did
                    if (
                        type(result) is Output
                        and (result.value is None or type(result.value) is bytes)
                        and (result.key is None or type(result.key) is bytes)
                    ):
                        outputs.append(result)
                    elif type(result) is Output:  # objects: encoded, or a TypeError
                        outputs.append(encode(result))
                    elif result is not None:
                        idle()  # a lazy result is read outside process(): as such
                        outputs.extend(check(result))  # checked: a TypeError names it
                except (TransactionError, FatalError):  # the transaction aborts: redone, or stop
                    work.records.extend(records[:done])  # processed, now to be dropped
                    raise
                except Exception as exc:
                    outputs.extend(self._failed([records[done]], exc))
                    work.dead_lettered += 1
                    if isinstance(exc, DecodeError):
                        work.undecodable += 1
                done += 1
        finally:
            idle()
        mark_runs(records, done, work.offsets)
        processed = records[:done] if done < n else records
        work.records.extend(processed)
        work.size += self._sizing.count(processed)
        return done

    def _failed(self, records: Sequence[Record], exc: Exception) -> list[Output]:
        first = records[0]
        if self.config.dead_letter_topic is None:
            log.error(
                "processor failed on %s[%d]@%d: %r", first.topic, first.partition, first.offset, exc
            )
            raise ProcessingError(first.topic, first.partition, first.offset, exc) from exc
        log.warning(
            "dead-lettering %d record(s) from %s[%d]@%d: %r",
            len(records),
            first.topic,
            first.partition,
            first.offset,
            exc,
        )
        return [dead_letter(r, exc, self.config.dead_letter_topic) for r in records]

    async def _end_on_cancel(self, session: TransactSession) -> None:
        ending = self._ending
        try:
            if ending is not None:
                self.last_outcome = await ending  # finish the end already in flight
            elif session.in_transaction:
                self.last_outcome = await session.end(commit=False)
        except Exception as exc:
            log.error("ending the transaction on cancellation failed: %r", exc)
        if self.last_outcome is not None:
            log.info("cancelled; last transaction %s", self.last_outcome.value)


_NEVER = float("inf")  # no deadline (work done ahead stops when the commit is done)


def _all_room(room: int, remaining_s: float) -> int:
    """Poll size of the batch strategy: everything there is room for."""
    return room
