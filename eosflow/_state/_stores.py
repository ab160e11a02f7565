"""``Stores``: a processor's state stores, kept exactly once beside the transaction.

The session owns one ``Stores`` and calls it at the points of a transaction's life and
of the group's; nothing else reaches into it. With no store declared every call returns
at once, so a stateless app pays nothing (and no branch on "stateful" runs elsewhere).

- **Start**: every changelog topic exists (created compacted, one partition per input
  partition) or is checked (``_aiokafka.ensure_topics``).
- **Assignment**: each new input partition's local copy is opened (reused when the
  partition never left, as when a rebalance revokes and gives back the same ones) and
  restored in the background (``_restore``); the session keeps the partition paused and
  unprocessed until it is ready. **Revocation** drops the restore of what moved and
  keeps the local copies open until the next ``begin``: records polled before the
  revocation may still be processed (their transaction aborts), and they read a store
  that is still there. Only then are the copies of partitions no longer held closed.
- **Transaction**: writes collect in ``Layers`` (the open transaction's, and the work
  done ahead of the next one while a commit is in flight). ``send`` produces the sealed
  transaction's changelog records -- changed keys, then a position record per consumed
  input partition and store -- into the same Kafka transaction, before the commit's
  flush. Only a **commit** writes them to the local copy, with the checkpoints the
  produce gave; an **abort** drops them. After a **recovery** (an EndTxn whose outcome
  only the broker knows) every held partition restores again from its checkpoint: the
  changelog, not the local copy, knows whether that transaction committed.
- **Processing**: ``bind`` wraps ``process`` so ``Processor.state(name)`` gives the store
  of the record's partition; a record that raises leaves no write behind.
- **Time** (``_time``, with ``_windows`` and ``_timers``): windowed stores and the timers
  are stores of bytes; with either declared, ``bind`` also takes each record's event time
  before ``process`` (the partition's stream time moves up to it) and after it hands the
  windows that closed to ``closed`` and the due timers to ``fire``, in the record's
  transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import _aiokafka as ak
from .._errors import FatalError, TransactionError
from .._records import Partition, StateNow
from ._batch import BatchState, run_batch
from ._changelog import (
    changelog_topic,
    check_names,
    check_written_fits,
    decode_written,
    encode_position,
    encode_written,
)
from ._declare import has_timers
from ._global import GlobalTable, GlobalTables
from ._layers import Layers
from ._local import Checkpoint, Env, LocalPartition, instance_dir
from ._reads import Reads
from ._restore import Job, Restorer
from ._seat import NOTHING, Seat
from ._settings import StateSettings
from ._sizes import Sizes
from ._store import RESERVED_KEY, Serde, Store
from ._sync import Feed, Sync, Unsynced
from ._table_restore import TableJob, TableRestorer, at
from ._tables import Table, apply, check_partitions
from ._time import EventTime
from ._timers import STORE as TIMERS
from ._timers import Timer, wall_ms

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

    from .._records import Record


log = logging.getLogger("eosflow.state")

Process = Callable[["Record"], Awaitable[Any]]


async def _nothing() -> None:
    """What a table's record gives the engine: no output (it updated the table)."""


_NO_HANDLES: dict[str, Store[Any]] = {}  # what ``state()`` finds outside process (never filled)


class Stores(Reads):
    def __init__(
        self,
        config: StateSettings,
        specs: Mapping[str, Serde],
        on_ready: Callable[[Partition], None],
        on_failed: Callable[[Exception], None],
        on_late: Callable[[str, int], None] | None = None,
        tables: Mapping[str, Table | GlobalTable] | None = None,
        copartitioned: bool = False,
        metadata: Mapping[Any, str] | None = None,
        feed: Feed | None = None,
    ) -> None:
        """``on_late(window, records)``: late records a committed transaction counted.
        ``tables``: the processor's (``_tables``), whose topics ``config`` subscribes
        to beside the input topics. ``copartitioned``: the processor's, the input topics
        one stream of tasks (tables make them so too). ``metadata``: each partition's
        committed offset's metadata, kept current by the session's positions. ``feed``:
        the consumer's side as the sync asks for it (``_sync.Feed``; none: nothing is
        caught up)."""
        self.config = config
        self.specs = dict(specs)
        tables = tables or {}
        self.tables = {n: t for n, t in tables.items() if isinstance(t, Table)}
        globals_ = {n: t for n, t in tables.items() if isinstance(t, GlobalTable)}
        self._table_of = {t.topic: name for name, t in self.tables.items()}
        self._streams = tuple(t for t in config.input_topics if t not in self._table_of)
        self.stateful = bool(self.specs or tables)
        # partition p of every input and table topic together (range assignment), their
        # records in timestamp order per task (``_sync``)
        self.copartitioned = copartitioned or bool(self.tables)
        idle_s = max((t.max_idle_s for t in self.tables.values()), default=0.0)
        # the session's poll goes through it (``admit``, ``give_back``, ``forget``)
        sync = (
            Sync(self._streams, self._table_of, idle_s, feed=feed or Feed())
            if self.copartitioned
            else None
        )
        self.sync = sync or Unsynced()
        self._table_positions: dict[Partition, int] = {}  # tables: sealed txn's next offsets
        self._views, self._tables_at = {}, {}
        self.current: Partition | None = None  # the partition of the record in process()
        # ``bind``'s: what the engine's loop calls before each run of one partition's
        # records (a stateful app's, one window's, a join's), else None; what it
        # returns takes the run's records (None: the bound process)
        self.entering: Callable[[Partition], Process | None] | None = None
        self._seat: Seat | None = None  # the processor's, once bound
        self._layers = Layers()
        self._local: dict[Partition, LocalPartition] = {}
        self._held: set[Partition] = set()
        # per partition: its stores by name (those of ``current`` in ``now``)
        self._handles: dict[Partition, dict[str, Store[Any]]] = {}
        self.now: dict[str, Store[Any]] = {}
        # windows and timers: stream time, closes, firing, late records (``_time``)
        self._time = EventTime(self._open, config.dead_letter_topic, on_late)
        self._env: Env | None = None
        self._scope = None  # the seat's, once bound (``Reads.names``)
        self._tasks: tuple[frozenset[str], ...] | None = None  # the seat's (``Seat.tasks``)
        self._stopped = False  # no restore starts after stop (a rebalance ending late)
        # the sealed transaction's position records: (partition, store, last batch, its
        # record count, position), read once it committed
        self._positions: list[tuple[Partition, str, asyncio.Future[object], int, int | None]] = []
        self._ready: set[Partition] = set()  # held, and restored: processed
        self._sizes = Sizes()  # the local copies' keys counted for the console, a walk a tick
        # each partition's committed offset's metadata (the session's, kept current by
        # its offset fetches): what the restore must read past (``_changelog``)
        self.metadata: Mapping[Any, str] = {} if metadata is None else metadata

        self._on_ready = on_ready
        wait_s = max(config.retry_timeout_s, 1.0)
        self._restorer = Restorer(config, self._restored, on_failed, wait_s=wait_s)
        self._table_restorer = TableRestorer(config, self._restored, on_failed, wait_s=wait_s)
        if self.specs:
            check_names(config.group_id, self._streams, sorted(self.specs))
        if TIMERS in self.specs:  # a fire's commit names what it wrote per store (written)
            check_written_fits(self.specs)
        self._root = instance_dir(config.state_dir, config.group_id, config.transactional_id)
        self.globals = GlobalTables(config, globals_, self._root, self._shared_env, on_failed)

    def _shared_env(self) -> Env:
        if self._env is None:
            self._env = Env(read_cache_bytes=self.config.state_cache_bytes)
        return self._env

    def refetch_offsets(self, fetch: Callable[[Partition], Awaitable[int | None]]) -> None:
        """``fetch(partition)`` gets its committed offset again and moves it there, for
        a restore that found a store ahead of it (``_restore``); the offset's metadata
        comes through ``metadata``."""

        async def refetch(partition: Partition) -> tuple[int | None, dict[str, int]]:
            committed = await fetch(partition)
            return committed, decode_written(self.metadata.get(partition))

        self._restorer.refetch = refetch

    def changelogs(self, topic: str) -> dict[str, str]:
        """store -> its changelog topic, for input ``topic`` (none for a table's)."""
        if topic in self._table_of:
            return {}
        return {s: changelog_topic(self.config.group_id, topic, s) for s in self.names(topic)}

    # --- start and stop ------------------------------------------------------------------

    async def start(self, producer: AIOKafkaProducer) -> None:
        """Create or check every changelog topic; check that every table (and, with
        ``copartitioned``, every input) is co-partitioned (after the producer started)."""
        if not self.stateful and not self.copartitioned:
            return
        cfg = self.config
        timeout = cfg.transaction_timeout_s
        global_topics = [t.topic for t in self.globals.specs.values()]
        counts = await ak.partition_counts(producer, [*cfg.input_topics, *global_topics], timeout)
        tasks = self._tasks
        check_partitions(self.tables, self._streams, counts, self.copartitioned, tasks)
        if isinstance(self.sync, Sync):  # co-partitioned: keys checked as they are read
            joined = cfg.input_topics if tasks is None else [t for g in tasks for t in g]
            self.sync.placement.expect({t: counts[t] for t in joined})
        if not self.stateful:
            return
        await self.globals.start(counts)  # read to their ends before the first record
        wanted = {
            changelog: (topic, counts[topic])
            for topic in self._streams
            for changelog in self.changelogs(topic).values()
        }
        if not wanted:
            return
        await ak.ensure_topics(producer, wanted, cfg.changelog_replication_factor, timeout)
        # their metadata now, tracked: the first commit's changelog produce need not wait
        # for a new topic's leaders under the session lock
        await ak.partition_counts(producer, sorted(wanted), timeout, exist=True)

    async def stop(self) -> None:
        self._stopped = True
        await self._restorer.stop()
        await self._table_restorer.stop()
        await self.globals.stop()
        self._layers.discard()
        self._held.clear()
        self._ready.clear()
        self._settle()

    def state_now(self) -> StateNow:
        """What restores now (``RestoreProgress``), and each ready copy's ``sizes``."""
        return StateNow(self._restorer.progress() + self._table_restorer.progress(), self.sizes())

    # --- the group --------------------------------------------------------------------

    def _restored(self, partition: Partition) -> None:
        """``partition``'s stores are restored: its records are processed from now on.
        The restore wrote under live handles: a window's reads its stream time again."""
        self._layers.stores_changed()
        self._ready.add(partition)
        self._on_ready(partition)

    def assigned(self, committed: Mapping[Partition, int | None]) -> set[Partition]:
        """Open and start restoring the stores of newly assigned partitions (their
        committed offsets given) and the copies of tables; returns those to hold back
        until ready."""
        if not self.stateful or self._stopped:
            return set()
        held = {p for p in committed if self.specs or p[0] in self._table_of}
        for partition in held:
            self._held.add(partition)
            self._ready.discard(partition)
            self._restore(partition, committed[partition])
        return held

    def revoked(self, partitions: Iterable[Partition]) -> None:
        gone = [p for p in partitions if p in self._held]
        self._held.difference_update(gone)
        self._ready.difference_update(gone)
        self._restorer.remove(gone)
        self._table_restorer.remove(gone)

    def recovered(self, committed: Mapping[Partition, int | None]) -> set[Partition]:
        """After a recovery: drop the writes in flight and restore every held partition
        again from its checkpoint (the changelog knows whether the last transaction
        committed). Returns those to hold back until ready."""
        self.discard()
        if self._stopped:
            return set()
        again = {p: committed.get(p) for p in self._held}
        self._ready.clear()
        for partition, offset in again.items():
            self._restore(partition, offset)
        return set(again)

    def _restore(self, partition: Partition, committed: int | None) -> None:
        local = self._local.get(partition)
        if local is None:
            table = self._table_of.get(partition[0])
            stores = self.names(partition[0]) if table is None else [table]
            env = self._shared_env()
            local = self._local[partition] = LocalPartition(self._root, partition, stores, env)
        table = self._table_of.get(partition[0])
        if table is not None:
            self._table_restorer.add(TableJob(partition, local, table, committed))
            return
        job = Job(partition, local, committed, decode_written(self.metadata.get(partition)))
        self._restorer.add(job, self.changelogs(partition[0]))

    def _settle(self) -> None:
        """Close the local copies of partitions no longer held."""
        for partition in [p for p in self._local if p not in self._held]:
            self._views.clear()
            self._tables_at.clear()
            self._local.pop(partition).close()
            self._handles.pop(partition, None)
            self._time.forget(partition)

    # --- the transaction ------------------------------------------------------------

    def begin(self, adopted: bool) -> None:
        if not self.stateful:
            return
        self._settle()
        self._layers.begin(adopted)
        self._time.begin(adopted)
        self._positions.clear()
        self._table_positions.clear()

    def seal(self) -> None:
        self._layers.seal()
        self._time.seal()

    async def send(
        self,
        producer: AIOKafkaProducer,
        consumed: Mapping[Partition, int],
        sends: list[asyncio.Future[object]],
        queue_timeout_s: float,
        unmoved: Collection[Partition] = (),
    ) -> None:
        """Produce the sealed transaction's changelog records: per consumed partition and
        store, the changed keys and then the position record (``consumed``'s offset); a
        batch waits at most ``queue_timeout_s`` to be queued (``_produce``). A partition
        in ``unmoved`` (its offset committed again, no record of it consumed: a
        wall-clock timer fired) gets its changed keys only: position records only grow."""
        if not self.stateful:
            return
        sealed = self._layers.seal()
        for partition, position in consumed.items():
            topic, p = partition
            if topic in self._table_of:  # no changelog: the position is the offset
                self._table_positions[partition] = position
                continue
            moved = partition not in unmoved
            for store, changelog in self.changelogs(topic).items():
                writes = sealed.get((store, partition))
                records: list[tuple[bytes, bytes | None]] = [*(writes or {}).items()]
                if moved:
                    records.append((RESERVED_KEY, encode_position(position)))
                elif not records:
                    continue
                last, count = await ak.send_to_partition(
                    producer, changelog, p, records, sends, queue_timeout_s
                )
                at = position if moved else None  # no checkpoint: the writes go to disk
                self._positions.append((partition, store, last, count, at))

    def written_needs_acks(self) -> bool:
        """Whether ``written`` must wait for the changelog records' acknowledgements."""
        return any(True for _ in self._unpositioned())

    def _unpositioned(self) -> Iterator[tuple[Partition, str, asyncio.Future[object], int]]:
        yield from ((p, s, last, n) for p, s, last, n, at in self._positions if at is None)

    def written(self) -> dict[Partition, str] | None:
        """Once the sealed transaction's changelog records are acknowledged: per partition
        it wrote without moving its position (wall-clock timers fired, no record of it
        consumed), the changelog offset of its last record per store (``encode_written``),
        the metadata its committed offset carries, so that the next owner's restore reads
        past them (``Restorer``); a moved partition's position record says as much.
        None when such an offset is unknown (aiokafka took a retried batch for a
        duplicate): the transaction must not commit."""
        offsets: dict[Partition, dict[str, int]] = {}
        for partition, store, last, count in self._unpositioned():
            base = last.result().offset  # type: ignore[attr-defined]
            if base is None or base < 0:
                return None
            offsets.setdefault(partition, {})[store] = base + count - 1
        return {p: encode_written(o) for p, o in offsets.items()}

    def committed(self) -> None:
        """The sealed transaction committed: its writes and checkpoints go to disk."""
        if not self.stateful:
            return
        sealed = self._layers.sealed
        changes: dict[Partition, dict[str, dict[bytes, bytes | None]]] = {}
        checkpoints: dict[Partition, dict[str, Checkpoint]] = {}
        for partition, store, last, count, position in self._positions:
            base = last.result().offset  # type: ignore[attr-defined]
            if position is not None and base is not None and base >= 0:
                offset = base + count - 1
                checkpoints.setdefault(partition, {})[store] = Checkpoint(
                    offset + 1, offset, position
                )
            # else no position record (an unmoved partition), or aiokafka took a retried
            # batch for a duplicate and knows no offset: the writes go to disk under the
            # previous checkpoint (a restore replays them)
            writes = sealed.get((store, partition))
            if writes:
                changes.setdefault(partition, {})[store] = writes
        for partition in checkpoints.keys() | changes.keys():
            local = self._local.get(partition)
            if local is not None:
                local.apply(changes.get(partition, {}), checkpoints.get(partition, {}))
        for partition, position in self._table_positions.items():
            local, table = self._local.get(partition), self._table_of[partition[0]]
            if local is not None:
                rows: Mapping[bytes, bytes | None] = sealed.get((table, partition)) or {}
                local.apply({table: rows}, {table: at(position)})
        self._table_positions.clear()
        self._positions.clear()
        self._layers.committed()
        self._time.committed()

    def discard(self) -> None:
        """The transaction aborted (or the work ahead was dropped): its writes go."""
        self._layers.discard()
        self._time.discard()
        self._positions.clear()
        self._table_positions.clear()

    # --- processing ----------------------------------------------------------------

    def bind(self, seat: Seat, check: Callable[[Any], Any]) -> Process:
        """The seat's ``processor.process`` (a ``Processor``'s), made to know its record's
        partition for ``state()`` -- the seat is where the processor finds its stores
        (``check``: what the app does with a result, raising for a wrong one)
        and, when failing records are dead-lettered, to take back the writes of one that
        raises (without a dead-letter topic a raise stops the app: its transaction aborts,
        and its writes with it). A table's record updates the table's copy instead."""
        process, rows = self._bind(seat, check)
        table_of = self._table_of
        if not table_of or rows:
            return process

        async def process_or_apply(record: Record) -> Any:
            """A table's record updates its copy (no ``process``); others go on."""
            if record.topic not in table_of:
                return await process(record)
            return await self._row(record)

        return process_or_apply

    def idle(self) -> None:
        """No record is in process: ``table()``, ``state()`` and ``window()`` find
        nothing. The engine calls it before anything else may run: a join's record, a
        stateful app's and a window's (entered per run: ``entering``) have no frame of
        their own around ``process`` to reset what they set; the others reset on exit."""
        self.current = None
        self.now = _NO_HANDLES
        if self._seat is not None:
            self._seat.tables = NOTHING
            self._seat.windows = NOTHING

    def _row(self, record: Record) -> Awaitable[None]:
        """A table's record into its partition's copy, in the open transaction."""
        apply(self._handle(self._table_of[record.topic], (record.topic, record.partition)), record)
        return _nothing()

    def _bind(self, seat: Seat, check: Callable[[Any], Any]) -> tuple[Process, bool]:
        """``bind``'s wrapper, and whether it applies tables' records itself."""
        processor: Any = seat.processor
        process: Process = processor.process
        self._scope = self._time.scope = seat.scope
        self._tasks = seat.tasks  # a pipeline's co-partitioned stages' topics
        if seat.tasks is not None and isinstance(self.sync, Sync):
            self.sync.group(seat.tasks)
        if not self.stateful:
            return process, False
        seat.stores, self._seat = self, seat
        layers, handles = self._layers, self._handles
        empty: dict[str, Store[Any]] = {}

        def enter(partition: Partition | None) -> None:
            self.current = partition
            self.now = empty if partition is None else handles.get(partition, empty)

        per_run = self.config.dead_letter_topic is None
        timed, entered = self._time.bind(
            seat, process, check, has_timers(processor), enter, per_run
        )
        if timed is not process and per_run:
            self.entering = entered  # the loop enters each run (None: each record itself)
            return timed, False
        process = timed
        table_of, tables_at, no_tables = self._table_of, self._tables_at, NOTHING
        stores = bool(self.specs)  # else state() finds none: ``now`` stays empty

        row = self._row

        def enter_run(partition: Partition) -> Process | None:
            # a join's: a table's rows go to its copy; a stream's run is entered and its
            # records have no frame of ours -- what this sets stays until ``idle``,
            # which the engine calls before anything else may run
            if partition[0] in table_of:
                return row
            self.current = partition
            if stores:
                self.now = handles.get(partition, empty)
            seat.tables = tables_at.get(partition[1], no_tables)
            return None

        async def process_undoing(record: Record) -> Any:
            self.current = partition = (record.topic, record.partition)
            self.now = handles.get(partition, empty)
            undo = layers.start_undo()
            try:
                # its outputs checked here too: a record dead-lettered for what it
                # returned leaves no write either
                return check(await process(record))
            except BaseException:
                layers.revert(undo)
                raise
            finally:
                layers.undo = None
                self.current, self.now = None, empty
                seat.windows = NOTHING  # (a windowed record's frameless path leaves them)

        if self.config.dead_letter_topic is not None:
            return process_undoing, False
        if table_of:
            self.entering = enter_run  # the loop enters each run (``_native.drive``)
            return process, True
        # a stateful app's: no wrapper at all; the engine's loop enters each run of one
        # partition's records (``_native.drive``), and ``idle`` resets what it set
        self.entering = enter
        return process, False

    async def run_batch(
        self,
        seat: Seat,
        records: Sequence[Record],
        check: Callable[[Any], list[Any]],
        failed: Callable[[Sequence[Record], Exception], list[Any]],
    ) -> tuple[list[Any], int]:
        """The seat's ``processor.process_batch(records)`` with its stores and windows
        (``_batch``; the seat holds the call's ``BatchState``):
        returns the outputs (the finals of the windows the batch closed after its own)
        and how many records were dead-lettered. ``check``: a result as outputs;
        ``failed``: the app's error policy (dead letters, or a raise)."""
        processor: Any = seat.processor
        if not self.specs:
            try:
                return check(await processor.process_batch(records)), 0
            except (TransactionError, FatalError):
                raise
            except Exception as exc:
                return failed(records, exc), len(records)
        windows = self._time.batch_windows()
        stores = [name for name in self.specs if name not in windows]
        state = BatchState(self._open, windows, stores)
        time = self._time

        def step(state: BatchState, failed: Any) -> list[Any]:
            windows, late = time.window_stores, time.count_late
            return state.take(processor, records, windows, late, failed, self._layers)

        dlt = self.config.dead_letter_topic is not None
        return await run_batch(seat, state, step, self._layers, check, failed, dlt)

    # --- wall-clock timers (asked by the engine, ``_timers``) ---------------------------

    def clock_due(self) -> list[Partition]:
        """The ready partitions with a wall-clock timer due now, in order (none without
        timers)."""
        if not self._time.has_timers:
            return []
        now = wall_ms()
        ready = sorted(p for p in self._ready if p[0] not in self._table_of)
        return [p for p in ready if self._time.due_by_clock(p, now)]

    async def fire_clock(
        self,
        partition: Partition,
        check: Callable[[Any], list[Any]],
        failed: Callable[[Partition, Timer, Exception], list[Any]],
        limit: int,
    ) -> tuple[list[Any], int]:
        """Fire ``partition``'s wall-clock timers due now, in the open transaction: each
        deleted and ``fire(timer)`` called (``state()`` and ``timers`` are that partition's;
        windows refuse: no record); their outputs, checked with ``check``. A ``fire`` that
        raises leaves no write but the timer's deletion, and ``failed`` gives its outputs
        (a dead letter) or raises (the app stops; the transaction aborts); a
        ``TransactionError`` (retry) aborts the transaction, as from ``process``. At most
        ``limit`` fire (the rest in the next transaction: a backlog after an outage never
        outgrows one); returns the outputs and how many fired."""
        empty: dict[str, Store[Any]] = {}
        out: list[Any] = []
        fired = 0
        self.current, self.now = partition, self._handles.get(partition, empty)
        try:
            for timer in self._time.due_by_clock(partition, wall_ms(), take=limit):
                fired += 1
                if not self._time.take(partition, timer):
                    continue  # an earlier fire moved or cancelled it
                undo = self._layers.start_undo()
                try:
                    out.extend(check(await self._time.fire(timer)))
                except (TransactionError, FatalError):
                    raise  # the transaction aborts: all is redone, or the app stops
                except Exception as exc:
                    self._layers.revert(undo)
                    out.extend(failed(partition, timer, exc))
                finally:
                    self._layers.undo = None
        finally:
            self.current, self.now = None, empty
        return out, fired
