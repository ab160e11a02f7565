"""``EventTime``: what windows and timers add to processing, for ``Stores``.

With windowed stores (``_windows``) or timers (``_timers``) declared, each record's
``process`` runs between two steps, in the record's transaction:

- before it, the record's event time (``Processor.timestamp``) is taken: every window
  store's and the timers' stream time for the record's partition moves up to it;
- after it, the windows that closed are handed to ``closed`` (windows in start order,
  keys in byte order) and deleted, then the due timers to ``fire`` (time, then key
  order) and deleted; their outputs follow the record's own. A record every window of
  which had closed is late: dead-lettered (``LateRecord``) when a dead-letter topic is
  set, else counted, and reported through ``on_late`` once its transaction commits.

Nothing here is kept across records but handles. A handle keeps its partition's stream
time and reads it from its store again after an abort, a record taken back or a restore
(``Layers.generation``), so none of these leaves anything stale behind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError
from .._records import Partition
from ._seat import Seat
from ._sessions import Session, SessionStore
from ._sliding import Sliding, SlidingStore
from ._store import Serde, Store
from ._timers import STORE as TIMERS
from ._timers import Timer, TimerStore
from ._windows import Hopping, LateRecord, Tumbling, WindowSpec, WindowStore, event_time

if TYPE_CHECKING:
    from .._records import Record

Process = Callable[["Record"], Awaitable[Any]]
AnySpec = WindowSpec | Session | Sliding
Windowed = WindowStore[Any] | SessionStore[Any] | SlidingStore[Any]


def overrides(processor: object, method: str) -> bool:
    """Whether ``processor``'s class overrides ``Processor.<method>`` (``fire``: then it
    has timers; ``timestamp``: its own time is read, else the record's inline). Told by
    the defining module: ``Processor`` imports this room, not this room it."""
    fn = getattr(type(processor), method, None)
    return fn is not None and getattr(fn, "__module__", "") != "eosflow._processor"


def declared_windows(processor: object) -> dict[str, AnySpec]:
    """The windowed stores ``processor`` declares (its ``windows`` mapping: name ->
    ``Tumbling``, ``Hopping``, ``Session`` or ``Sliding``), checked: a one-line ``ConfigError``
    otherwise, and for a name that is also a store's."""
    raw = getattr(processor, "windows", None) or {}
    kind = type(processor).__name__
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{kind}.windows must map names to window specs (e.g. "
            f"{{'clicks': eosflow.Tumbling(size_s=300)}}), not {type(raw).__name__}"
        )
    stores = getattr(processor, "stores", None) or {}
    out: dict[str, AnySpec] = {}
    for name, spec in raw.items():
        if not isinstance(name, str) or not isinstance(spec, (Tumbling, Hopping, Session, Sliding)):
            raise ConfigError(
                f"{kind}.windows[{name!r}]: expected a name and eosflow.Tumbling, "
                f"eosflow.Hopping, eosflow.Session or eosflow.Sliding, got {spec!r}"
            )
        if name in stores:
            raise ConfigError(f"{kind}: {name!r} names both a store and a window; rename one")
        if not isinstance(getattr(spec, "serde", None), Serde):  # a registry's schema, say
            raise ConfigError(
                f"{kind}.windows[{name!r}].serde is {getattr(spec, 'serde', None)!r}: a window "
                "keeps its values through a Serde (eosflow.JSON, eosflow.Model(M)); a "
                "registry's schema is for stores, tables and topics"
            )
        out[name] = spec
    return out


class EventTime:
    def __init__(
        self,
        backing: Callable[[str, Partition], Store[Any]],
        dead_letter_topic: str | None,
        on_late: Callable[[str, int], None] | None,
    ) -> None:
        """``backing(name, partition)``: the store holding a window's or the timers'
        data; ``on_late(window, records)``: late records a committed transaction
        counted."""
        self._backing = backing
        self._dlt = dead_letter_topic
        self._on_late = on_late
        self._specs: dict[str, AnySpec] = {}
        self._has_timers = False
        self._windows: dict[Partition, dict[str, Windowed]] = {}
        self._lists: dict[Partition, list[Windowed]] = {}  # the same handles, in name order
        self._plain: dict[Partition, dict[str, Windowed]] = {}  # tumbling and hopping only
        self._timers: dict[Partition, TimerStore] = {}
        self._none: dict[str, Windowed] = {}
        self._late = _Tally()
        self._fire: Callable[[Timer], Awaitable[Any]] | None = None
        self._clock_fire = False  # a wall-clock timer's fire runs: no record, no window
        # a pipeline's (``Seat.scope``): topic -> the windows and timers kept there
        self.scope: Mapping[str, frozenset[str]] | None = None

    def bind(
        self,
        seat: Seat,
        process: Process,
        check: Callable[[Any], Any],
        timers: bool,
        enter: Callable[[Partition | None], None],
        per_run: bool = False,
    ) -> tuple[Process, Callable[[Partition], None] | None]:
        """``process`` with the two steps around it, or as it is when the processor has
        neither windows nor ``timers``; ``check``: a result as a list of outputs;
        ``enter(partition)``: the record's partition is the one in process (None: none
        is), called around the whole of it, ``closed`` and ``fire`` included. With
        ``per_run`` (the engine's loop enters each run of one partition's records, and
        nothing else runs between two records of one run), the path for one window
        may give a run's entering too: then the loop must call it before each run, and
        the records are not entered one by one.

        The per-record path of every windowed app, kept lean: the event time read
        without a call when ``timestamp`` is not overridden, the record's tumbling and
        hopping windows handed to the processor as a dict in its seat
        (``Processor.window``'s one lookup), ``closing`` asked only when the record
        moved a window's ``closed``. The commonest app, one window and no timers, gets a
        path of its own (``_one``): without the lists and loops of several handles it
        costs 7% less a record (56,533 -> 52,415 instructions on the window path
        alone)."""
        processor: Any = seat.processor
        self._specs = declared_windows(processor)
        self._has_timers = timers
        if not self._specs and not timers:
            return process, None
        self._fire = processor.fire
        if len(self._specs) == 1 and not timers:
            if per_run:
                return self._one_per_run(seat, process, check, enter)
            return self._one(seat, process, check, enter), None
        return self._many(seat, process, check, timers, enter), None

    def _one_per_run(
        self,
        seat: Seat,
        process: Process,
        check: Callable[[Any], Any],
        enter: Callable[[Partition | None], None],
    ) -> tuple[Process, Callable[[Partition], None]]:
        """``_one``'s steps with what is the same for a run of one partition's records
        -- entering it, its handle, its windows in the seat -- done once a run
        (``entered``), and the rest once a record (``timed``)."""
        processor: Any = seat.processor
        none, lists, plain = self._none, self._lists, self._plain
        own_time = overrides(processor, "timestamp")
        spec = next(iter(self._specs.values()))
        # a tumbling or hopping window's: late when its last window holding t is closed
        step = spec.advance_ms if isinstance(spec, (Tumbling, Hopping)) else 0
        run: list[Any] = [None, none]  # the run's handle (None: none), its windows

        def entered(partition: Partition) -> None:
            enter(partition)
            handles = lists.get(partition)
            if handles is None:
                handles = self._windows_of(partition)
            run[0] = handles[0] if handles else None  # none: a stage keeping no window
            run[1] = seat.windows = plain.get(partition, none)

        def timed(record: Record) -> Awaitable[Any]:
            h = run[0]
            if h is None:
                return process(record)
            t = event_time(processor, record) if own_time else record.timestamp
            before = h.advance(t, record.offset)
            if h.closed == before and step and (before is None or t - t % step > before):
                # no window closed, and none can call it late (its window is open):
                # nothing to do after process, and no frame of its own around it
                return process(record)
            return finish(record, h, before, t)

        def windows_back() -> None:  # the run's next record is not entered
            seat.windows = run[1]

        finish = self._finisher(seat, process, check, windows_back)

        return timed, entered

    def _one(
        self,
        seat: Seat,
        process: Process,
        check: Callable[[Any], Any],
        enter: Callable[[Partition | None], None],
    ) -> Process:
        """``bind``'s path for one window and no timers: ``_many``'s steps for one handle."""
        processor: Any = seat.processor
        none, lists, plain = self._none, self._lists, self._plain
        own_time = overrides(processor, "timestamp")

        def timed(record: Record) -> Awaitable[Any]:
            t = event_time(processor, record) if own_time else record.timestamp
            partition = (record.topic, record.partition)
            handles = lists.get(partition)
            if handles is None:
                handles = self._windows_of(partition)
            enter(partition)
            if not handles:  # a pipeline's topic whose stages keep no window
                seat.windows = none
                return process(record)  # what enter set stays until ``idle``
            h = handles[0]
            before = h.advance(t, record.offset)
            seat.windows = plain.get(partition, none)
            if h.closed == before and type(h) is WindowStore and not h.late_at(t):
                # nothing to do after process: no window closed, none can call it late
                # (its window is open). What was set stays until ``idle``: no coroutine
                # frame of its own around process, the commonest record's path
                return process(record)
            return finish(record, h, before, t)

        finish = self._finisher(seat, process, check, lambda: enter(None))

        return timed

    def _finisher(
        self,
        seat: Seat,
        process: Process,
        check: Callable[[Any], Any],
        after: Callable[[], None],
    ) -> Callable[[Record, Windowed, int | None, int], Awaitable[Any]]:
        """The rest of a record of one window that closed a window, or may be late, or
        whose window is not a tumbling or hopping one (``_one``, ``_one_per_run``):
        ``process``, lateness, the finals; then ``after``."""
        processor: Any = seat.processor
        closed, none = processor.closed, self._none

        async def finish(record: Record, h: Windowed, before: int | None, t: int) -> Any:
            try:
                try:
                    result = await process(record)
                finally:  # window() outside process() must not find the last record's
                    seat.windows = none
                if h.late:
                    self._late_record(h, t)
                if h.closed == before:  # no window closed: closing(before) is empty
                    return result
                out = await _finals(h, before, result, None, check, closed)
                return result if out is None else out
            finally:
                after()

        return finish

    def _many(
        self,
        seat: Seat,
        process: Process,
        check: Callable[[Any], Any],
        timers: bool,
        enter: Callable[[Partition | None], None],
    ) -> Process:
        """``bind``'s path for several windows, or timers."""
        processor: Any = seat.processor
        closed, fire = processor.closed, processor.fire
        none, lists, plain = self._none, self._lists, self._plain
        own_time = overrides(processor, "timestamp")

        async def timed(record: Record) -> Any:
            t = event_time(processor, record) if own_time else record.timestamp
            partition = (record.topic, record.partition)
            handles = lists.get(partition)
            if handles is None:
                handles = self._windows_of(partition)
            before = []  # (a loop: cheaper than a comprehension's frame, per record)
            for h in handles:
                before.append(h.advance(t, record.offset))
            clock = self._kept_timers(partition) if timers else None
            if clock is not None:
                clock.advance(t)
            enter(partition)
            try:
                seat.windows = plain.get(partition, none)
                try:
                    result = await process(record)
                finally:  # window() outside process() must not find the last record's
                    seat.windows = none
                out: list[Any] | None = None
                for h, b in zip(handles, before):  # noqa: B905 (one list from the other)
                    if h.late:
                        self._late_record(h, t)
                    if h.closed == b:  # no window closed: closing(b) is empty
                        continue
                    out = await _finals(h, b, result, out, check, closed)
                if clock is not None:
                    for timer in clock.due():
                        if not clock.take(timer):
                            continue
                        if out is None:
                            out = check(result)
                        out.extend(check(await fire(timer)))
                return result if out is None else out
            finally:
                enter(None)

        return timed

    def _late_record(self, h: Windowed, t: int) -> None:
        """The record in process met only closed windows of ``h``: dead-lettered
        (``LateRecord``) with a dead-letter topic, else counted."""
        if self._dlt is not None:
            raise LateRecord(
                f"record at {t} ms is late for window {h.name!r}: its windows closed "
                f"(grace {h.spec.grace_ms} ms)"
            )
        self._late.add(h.name)

    # --- what a processor asks for ----------------------------------------------------

    def window(self, name: str, partition: Partition | None) -> WindowStore[Any]:
        """(``Processor.window`` finds the record's windows itself: this is the way for
        what it does not find -- a wrong name or kind, or no record in process.)"""
        handle = self._handle(name, partition, "window")
        if not isinstance(handle, WindowStore):
            raise KeyError(f"{name!r} is not a tumbling or hopping window: {_use(handle)}")
        return handle

    def session(self, name: str, partition: Partition | None) -> SessionStore[Any]:
        handle = self._handle(name, partition, "session")
        if not isinstance(handle, SessionStore):
            raise KeyError(f"{name!r} is not a session window: {_use(handle)}")
        return handle

    def sliding(self, name: str, partition: Partition | None) -> SlidingStore[Any]:
        handle = self._handle(name, partition, "sliding")
        if not isinstance(handle, SlidingStore):
            raise KeyError(f"{name!r} is not a sliding window: {_use(handle)}")
        return handle

    def _handle(self, name: str, partition: Partition | None, what: str) -> Windowed:
        if name not in self._specs:
            raise KeyError(f"no window {name!r}; the processor declares {sorted(self._specs)}")
        if partition is None or self._clock_fire:
            raise RuntimeError(f"Processor.{what}() gives the window of the record in process()")
        self._windows_of(partition)
        handle = self._windows[partition].get(name)
        if handle is None:
            raise KeyError(f"no window {name!r} on {partition[0]}: no stage reading it keeps one")
        return handle

    def timers(self, partition: Partition | None) -> TimerStore:
        if not self._has_timers:
            raise KeyError("no timers: override Processor.fire to have them")
        if partition is None:
            raise RuntimeError("Processor.timers are the record's partition's, in process()")
        timers = self._kept_timers(partition)
        if timers is None:
            raise KeyError(f"no timers on {partition[0]}: no stage reading it overrides fire")
        return timers

    def batch_windows(self) -> dict[str, WindowSpec]:
        """The tumbling and hopping windows (those a batch keeps), by name."""
        return {n: s for n, s in self._specs.items() if isinstance(s, (Tumbling, Hopping))}

    def specs(self) -> dict[str, AnySpec]:
        """Every window's spec, by name (the console counts what they hold)."""
        return dict(self._specs)

    def window_stores(self, partition: Partition) -> list[WindowStore[Any]]:
        """``partition``'s tumbling and hopping windows, in name order (a batch's: it
        keeps no other kind, ``_batch.check_batch``)."""
        return [h for h in self._windows_of(partition) if type(h) is WindowStore]

    def count_late(self, window: str) -> None:
        """One late record for ``window``, reported once its transaction commits."""
        self._late.add(window)

    @property
    def has_timers(self) -> bool:
        return self._has_timers

    def due_by_clock(
        self, partition: Partition, now_ms: int, take: int | None = None
    ) -> list[Timer]:
        """``partition``'s wall-clock timers due at ``now_ms`` (``TimerStore.due_by_clock``)."""
        timers = self._kept_timers(partition) if self._has_timers else None
        return [] if timers is None else timers.due_by_clock(now_ms, take)

    def take(self, partition: Partition, timer: Timer) -> bool:
        timers = self._kept_timers(partition)
        return timers is not None and timers.take(timer)

    async def fire(self, timer: Timer) -> Any:
        """``fire(timer)`` for a wall-clock timer: no record, so no event time and no
        window (``window()`` and its kin refuse: a window's stream time and closing are
        a record's)."""
        assert self._fire is not None, "fire before bind"
        self._clock_fire = True
        try:
            return await self._fire(timer)
        finally:
            self._clock_fire = False

    def refuse(self, store: str) -> None:
        """A ``KeyError`` when ``store`` is a window's or the timers' (not a store)."""
        if store in self._specs:
            raise KeyError(f"{store!r} is a window: use Processor.window({store!r})")
        if store == TIMERS and self._has_timers:
            raise KeyError(f"{store!r} holds the timers: use Processor.timers")

    def _windows_of(self, partition: Partition) -> list[Windowed]:
        if not self._specs:
            return []
        listed = self._lists.get(partition)
        if listed is None:
            handles = self._windows[partition] = {}
            kept = None if self.scope is None else self.scope.get(partition[0])
            for name, spec in sorted(self._specs.items()):
                if kept is not None and name not in kept:
                    continue  # a pipeline's topic: another stage's window
                data = self._backing(name, partition)
                handles[name] = (
                    SessionStore(name, spec, data)
                    if isinstance(spec, Session)
                    else SlidingStore(name, spec, data)
                    if isinstance(spec, Sliding)
                    else WindowStore(name, spec, data)
                )
            listed = self._lists[partition] = list(handles.values())
            self._plain[partition] = {n: h for n, h in handles.items() if type(h) is WindowStore}
        return listed

    def _kept_timers(self, partition: Partition) -> TimerStore | None:
        """``partition``'s timers, or None where its topic keeps none (a pipeline's
        topic whose stages do not override ``fire``)."""
        timers = self._timers.get(partition)
        if timers is None:
            kept = None if self.scope is None else self.scope.get(partition[0])
            if kept is not None and TIMERS not in kept:
                return None
            timers = self._timers[partition] = TimerStore(self._backing(TIMERS, partition))
        return timers

    # --- the transaction's life and the group's (``Stores``) ---------------------------

    def forget(self, partition: Partition) -> None:
        """The partition's local copy closed: its handles go."""
        self._windows.pop(partition, None)
        self._lists.pop(partition, None)
        self._plain.pop(partition, None)
        self._timers.pop(partition, None)

    def begin(self, adopted: bool) -> None:
        self._late.begin(adopted)

    def seal(self) -> None:
        self._late.seal()

    def committed(self) -> None:
        if self._on_late is not None:
            for window, records in self._late.committed().items():
                self._on_late(window, records)

    def discard(self) -> None:
        self._late.discard()


async def _finals(
    h: Windowed,
    before: int | None,
    result: Any,
    out: list[Any] | None,
    check: Callable[[Any], Any],
    closed: Callable[..., Awaitable[Any]],
) -> list[Any] | None:
    """``out`` (the record's outputs so far; None: ``result`` alone, checked once a final
    joins it) with what ``closed`` returns for each window of ``h`` closed since
    ``before``, in order."""
    for window, key, value in h.closing(before):
        if out is None:
            out = check(result)
        out.extend(check(await closed(key, window, value)))
    return out


def _use(handle: Windowed) -> str:
    """How to get ``handle``'s kind of window."""
    call = (
        "session"
        if isinstance(handle, SessionStore)
        else "sliding"
        if isinstance(handle, SlidingStore)
        else "window"
    )
    return f"use Processor.{call}({handle.name!r})"


class _Tally:
    """Late records per window, by the unit of work they belong to (as ``Layers``: the
    open work's, the sealed transaction's), reported once that transaction commits."""

    def __init__(self) -> None:
        self.open: dict[str, int] = {}
        self.sealed: dict[str, int] = {}
        self._is_sealed = False

    def add(self, window: str) -> None:
        self.open[window] = self.open.get(window, 0) + 1

    def begin(self, adopted: bool) -> None:
        if not adopted:
            self.open = {}
        self.sealed, self._is_sealed = {}, False

    def seal(self) -> None:
        if not self._is_sealed:
            self.sealed, self.open, self._is_sealed = self.open, {}, True

    def committed(self) -> dict[str, int]:
        done, self.sealed = self.sealed, {}
        return done

    def discard(self) -> None:
        self.open, self.sealed, self._is_sealed = {}, {}, False
