"""Event-time windows: the specs a processor declares (``Tumbling``, ``Hopping``), the
``Window`` a value belongs to, ``WindowStore`` (what ``Processor.window(name)`` gives)
and ``Windows``, which keeps each input partition's stream time and closes windows.

**Event time** is a record's Kafka timestamp, or what the processor's
``timestamp(record)`` returns (milliseconds). **Stream time** is per input partition:
the largest event time processed there. It is kept in the window's store itself (one
meta key), so it commits, aborts and restores with the window's values: the same input
closes the same windows at the same records, whatever the interleaving of partitions,
crashes or rebalances.

A window ``[start, start + size)`` **closes** once its partition's stream time reaches
``end + grace``. Then, in the record's own transaction and after its ``process``:

- the processor's ``closed(key, window, value)`` is called once per key of the window,
  windows in start order, keys in byte order; what it returns joins the transaction's
  outputs (the **final result**, emitted exactly once: the emission and the deletion
  commit together);
- the window's values are deleted (tombstones in the changelog), so state stays bounded
  at any input length.

A record whose every window has closed is **late**: ``update`` leaves the windows
alone. Without a dead-letter topic it is counted (``Observer.late_records``,
``eosflow_late_records_total``) when its transaction commits; with one, the record is
dead-lettered (``LateRecord``).

Values live in an ordinary store (same local copy, changelog and restore) under keys
ordered by window start, then key: ``b"w" + start (8 bytes, order-preserving) + key``;
the stream time under ``TIME_KEY``. Closing is one range scan over the windows that
closed, run only when stream time crosses a window's close, not per record.

The handle keeps the stream time it reached, and the values a tumbling window's
``update`` computed (unserialized), and writes them to the store once a transaction,
not at every record: a deferred write (``Layers.defer``), made before the transaction
is sealed and before an undoable unit starts (a record that may be dead-lettered, a
batch, a timer's fire), and before the values' store is read or written otherwise
(``get``, ``put``, ``fetch``, ``closing``). Inside such a unit it writes at every
record, so that taking back part of it (a batch's late record) leaves the stream time
and values of the records before. When the layers' writes were dropped or taken back,
or a restore changed the store under the handle (``Layers.generation``), the handle
drops what it held and reads the stream time from the store again (at the next
record, and in ``update`` itself: the layers may move while a record's ``process``
awaits). A key updated again in the transaction costs a dict lookup, not a layered read,
a ``loads`` and a ``dumps``. Only values the serde gives back as they are (JSON's
numbers, strings, booleans and null; ``BYTES``' bytes) are held: others -- a tuple JSON
makes a list, a dict whose int keys it makes strings, anything mutable -- are serialized
at once, so what a later update reads never depends on where a seal fell.

Trade-off: windows close on stream time only, so a partition that stops receiving
records keeps its last windows open (as in Kafka Streams) until a later record arrives.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from .._errors import ConfigError
from .._native import bind_window, named_as
from ._layers import MISSING
from ._store import BYTES, JSON, Serde, Store, store_key

if TYPE_CHECKING:
    from .._records import Record

V = TypeVar("V")

TIME_KEY = b"\x01eosflow.stream-time"
"""The key of a window store's stream time (8 bytes, signed big-endian milliseconds)."""
_DATA = b"w"
_START = struct.Struct(">Q")  # a window start, shifted by 2**63 so byte order = number order
_SHIFT = 2**63
_TIME = struct.Struct(">q")
NO_TIME = -(2**63)  # before the first record
# per serde, the value types its round trip gives back as they are (immutable too)
_EXACT: dict[Serde, frozenset[type]] = {
    JSON: frozenset({int, float, str, bool, type(None)}),
    BYTES: frozenset({bytes}),
}


class LateRecord(Exception):
    """A record whose every window had closed, dead-lettered (a dead-letter topic is set)."""


class Window(NamedTuple):
    """One window of the store ``store``: ``[start_ms, end_ms)`` in event time."""

    store: str
    start_ms: int
    end_ms: int


def durations_ms(kind: str, span: tuple[str, float], grace_s: float) -> tuple[int, int]:
    """A window spec's span (``(name, seconds)``: a size or a gap, > 0) and grace (>= 0)
    in whole milliseconds, checked: a one-line ``ConfigError`` naming ``kind`` otherwise."""
    name, span_s = span
    for what, v in ((name, span_s), ("grace_s", grace_s)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise ConfigError(f"{kind}: {what} must be a number of seconds, not {v!r}")
    if span_s <= 0:
        raise ConfigError(f"{kind}: {name} must be > 0, not {span_s}")
    if grace_s < 0:
        raise ConfigError(f"{kind}: grace_s must be >= 0, not {grace_s}")
    ms = round(span_s * 1000)
    if ms < 1:
        raise ConfigError(f"{kind}: windows are in whole milliseconds: {span_s}")
    return ms, round(grace_s * 1000)


@dataclass(frozen=True)
class _Spec:
    """What a windowed store needs of its spec: sizes in milliseconds and the serde."""

    size_ms: int = field(init=False)
    advance_ms: int = field(init=False)
    grace_ms: int = field(init=False)

    def _set(self, kind: str, size_s: float, advance_s: float, grace_s: float) -> None:
        for what, v in (("size_s", size_s), ("advance_s", advance_s), ("grace_s", grace_s)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise ConfigError(f"{kind}: {what} must be a number of seconds, not {v!r}")
        if size_s <= 0:
            raise ConfigError(f"{kind}: size_s must be > 0, not {size_s}")
        if advance_s <= 0 or advance_s > size_s:
            raise ConfigError(
                f"{kind}: advance_s must be > 0 and at most size_s ({size_s}), not {advance_s}"
            )
        if grace_s < 0:
            raise ConfigError(f"{kind}: grace_s must be >= 0, not {grace_s}")
        size, advance = round(size_s * 1000), round(advance_s * 1000)
        if size < 1 or advance < 1:
            raise ConfigError(f"{kind}: windows are in whole milliseconds: {size_s}, {advance_s}")
        object.__setattr__(self, "size_ms", size)
        object.__setattr__(self, "advance_ms", advance)
        object.__setattr__(self, "grace_ms", round(grace_s * 1000))

    def starts(self, t: int) -> range:
        """The starts of the windows holding event time ``t``, ascending."""
        step = self.advance_ms
        last = t - t % step
        if step == self.size_ms:  # tumbling: the one window
            return range(last, last + step, step)
        first = last - (self.size_ms - 1) // self.advance_ms * self.advance_ms
        # a window [s, s + size) holds t when s > t - size
        while first + self.size_ms <= t:
            first += self.advance_ms
        return range(first, last + 1, self.advance_ms)

    def closed_through(self, stream_time: int) -> int | None:
        """The start of the last window closed at ``stream_time`` (None before the first
        record): every window starting at or before it has ``end + grace <= stream_time``."""
        if stream_time == NO_TIME:
            return None
        edge = stream_time - self.size_ms - self.grace_ms
        return edge - edge % self.advance_ms


@dataclass(frozen=True)
class Tumbling(_Spec):
    """Fixed windows of ``size_s`` seconds side by side (``[0, size)``, ``[size, 2 size)``,
    ... in epoch milliseconds): each record is in exactly one. A window closes
    ``grace_s`` after its end in stream time; records arriving later are late.
    ``serde`` serializes the values (``eosflow.JSON`` by default)."""

    size_s: float
    grace_s: float = 0.0
    serde: Serde = JSON

    def __post_init__(self) -> None:
        self._set("Tumbling", self.size_s, self.size_s, self.grace_s)


@dataclass(frozen=True)
class Hopping(_Spec):
    """Windows of ``size_s`` seconds starting every ``advance_s`` seconds (at most
    ``size_s``): a record is in about ``size_s / advance_s`` of them. A window closes
    ``grace_s`` after its end in stream time."""

    size_s: float
    advance_s: float
    grace_s: float = 0.0
    serde: Serde = JSON

    def __post_init__(self) -> None:
        self._set("Hopping", self.size_s, self.advance_s, self.grace_s)


WindowSpec = Tumbling | Hopping


def data_key(start_ms: int, key: bytes) -> bytes:
    return _DATA + _START.pack(start_ms + _SHIFT) + key


def read_time(store: Store[Any]) -> int:
    raw = store.get(TIME_KEY)
    return NO_TIME if raw is None else int(_TIME.unpack(raw)[0])


def stream_time(first: Callable[[bytes], tuple[bytes, bytes] | None]) -> int | None:
    """A window store's stream time in its local copy (None before a record), ``first``
    giving the first (key, value) at or after a key (``LocalPartition.seeker``)."""
    found = first(TIME_KEY)
    now = int(_TIME.unpack(found[1])[0]) if found is not None and found[0] == TIME_KEY else None
    return None if now == NO_TIME else now


def open_windows(
    first: Callable[[bytes], tuple[bytes, bytes] | None], most: int, reach: int | None = None
) -> tuple[list[int], int | None]:
    """The starts of the windows holding values in a window store's local copy, oldest
    first (at most ``most``), and its stream time (None before a record). ``first``
    gives the first (key, value) at or after a key (``LocalPartition.seeker``), so this
    costs one seek a window, not a read of every key; with ``reach`` (ms), from ``reach``
    before the stream time, not over the deletions of the windows closed before it."""
    now = stream_time(first)
    starts: list[int] = []
    at = _DATA if reach is None or now is None else data_key(now - reach, b"")
    while len(starts) < most:
        found = first(at)
        if found is None or found[0][:1] != _DATA or len(found[0]) < 1 + _START.size:
            break
        (shifted,) = _START.unpack_from(found[0], 1)
        starts.append(shifted - _SHIFT)
        if shifted == 2**64 - 1:
            break
        at = _DATA + _START.pack(shifted + 1)
    return starts, now


class WindowStore(Generic[V]):
    """One windowed store of one input partition, as ``Processor.window(name)`` gives it
    in ``process``. Its values commit, abort and restore like a store's; the windows it
    offers are the open ones (a closed window's values are gone)."""

    __slots__ = (
        "_at",
        "_at_window",
        "_data",
        "_deferred_in",
        "_edge",
        "_exact",
        "_generation",
        "_layers",
        "_made",
        "_now",
        "_prefix",
        "_serde",
        "_time_held",
        "_tumbling",
        "_values",
        "closed",
        "late",
        "name",
        "spec",
        "time",
    )

    def __init__(self, name: str, spec: WindowSpec, data: Store[bytes]) -> None:
        self.name, self.spec = name, spec
        self._serde, self._data = spec.serde, data
        # the window's size in ms when it is tumbling (``update``'s hot path), else 0
        self._tumbling = spec.size_ms if spec.advance_ms == spec.size_ms else 0
        self.time = NO_TIME  # the record's event time, set before process()
        self._now = NO_TIME  # the partition's stream time (the record's included)
        # the start of the last window closed at the partition's stream time (None: none
        # yet): a record closed windows when its ``advance`` moved it (``EventTime``)
        self.closed: int | None = None
        self._edge = NO_TIME  # the stream time at which the window after it closes
        self.late = False  # the record in process() met only closed windows
        self._made: dict[int, Window] = {}  # ``window``
        # the tumbling window ``update`` wrote last: its start, key prefix and Window
        self._at: int | None = None
        self._prefix, self._at_window = b"", Window(name, NO_TIME, NO_TIME)
        self._layers = data.layers
        self._generation = -1  # of the layers when ``_now`` was read: none yet
        self._deferred_in: object = None  # the ``Layers.deferred`` list it is in, if any
        self._time_held = False  # ``_now`` is ahead of the store's (a deferred write)
        # data key -> value ``update`` computed and holds, not yet serialized (deferred):
        # only values the serde gives back exactly (not a tuple that JSON makes a list),
        # so that when it is serialized never changes what a later update reads
        self._values: dict[bytes, Any] = {}
        self._exact = _EXACT.get(spec.serde, frozenset())

    def __repr__(self) -> str:
        topic, p = self._data.partition
        return f"<eosflow.WindowStore {self.name!r} of {topic}[{p}]>"

    def window(self, start_ms: int) -> Window:
        """The window starting at ``start_ms``; those of the last few starts are kept (a
        record's windows are mostly those of the records before it)."""
        made = self._made.get(start_ms)
        if made is None:
            if len(self._made) >= 64:
                self._made.clear()
            made = self._made[start_ms] = Window(self.name, start_ms, start_ms + self.spec.size_ms)
        return made

    def late_at(self, t: int) -> bool:
        """Whether a record at event time ``t`` meets only closed windows: ``update``
        would call it late. (The window holding ``t`` that starts last is open, or none
        is.)"""
        closed = self.closed
        return closed is not None and t - t % self.spec.advance_ms <= closed

    def windows(self) -> list[Window]:
        """The open windows holding the record's event time, in start order."""
        return [self.window(s) for s in self.open_starts()]

    def open_starts(self) -> range:
        """The starts of the open windows holding the record's event time, ascending
        (empty: the record is late)."""
        starts, closed = self.spec.starts(self.time), self.closed
        if closed is None or starts.start > closed:
            return starts
        # window starts, and the last closed one, are multiples of the advance
        return range(closed + self.spec.advance_ms, starts.stop, starts.step)

    def get(self, key: bytes | str, start_ms: int, default: V | None = None) -> V | None:
        """The value of ``key`` in the window starting at ``start_ms``."""
        if self._values:
            self._write_values()
        raw = self._data.get(data_key(start_ms, store_key(key)))
        return default if raw is None else self._serde.loads(raw)  # type: ignore[no-any-return]

    def put(self, key: bytes | str, start_ms: int, value: V) -> None:
        """Set ``key`` in the window starting at ``start_ms`` (which must be open)."""
        if self.closed is not None and start_ms <= self.closed:
            raise ValueError(f"window {self.name!r} starting at {start_ms} ms has closed")
        if self._values:
            self._write_values()
        self._data.put(data_key(start_ms, store_key(key)), self._serde.dumps(value))

    def update(self, key: bytes | str, fn: Callable[[V], V], initial: V) -> list[tuple[Window, V]]:
        """Apply ``fn`` to ``key``'s value (``initial`` where it has none) in every open
        window holding the record's event time; returns (window, new value) for each.
        Emit those from ``process`` for results on every update; override ``closed`` for
        final results. None open: the record is late and nothing changes."""
        k = key if type(key) is bytes else store_key(key)
        loads, dumps, data = self._serde.loads, self._serde.dumps, self._data
        closed, step, t = self.closed, self._tumbling, self.time
        if step:  # tumbling: the one window (the hot path, no range)
            start = t - t % step
            if closed is not None and start <= closed:
                self.late = True
                return []
            if start != self._at:  # the record's window is mostly the last record's
                self._at, self._prefix = start, _DATA + _START.pack(start + _SHIFT)
                self._at_window = self.window(start)
            dk = self._prefix + k
            layers = self._layers
            if layers.undo is None:  # held, and serialized once a transaction (deferred)
                if self._generation != layers.generation:  # moved while in process (a
                    self._reread()  # restore ended, an abort): what was held is gone
                values = self._values
                value = values.get(dk, MISSING)
                if value is MISSING:
                    raw = data.raw(dk)
                    value = initial if raw is None else loads(raw)
                value = fn(value)
                # (``self._values`` again: an ``fn`` reading this window wrote them out)
                if type(value) in self._exact:  # its serialization gives it back as it is
                    self._values[dk] = value
                    if self._deferred_in is not layers.deferred:
                        self._deferred_in = layers.deferred
                        layers.defer(self)
                else:  # (a list, a tuple, ...): serialized now, as a record at a time
                    raw = dumps(value)  # first: a value it cannot write leaves all as was
                    self._values.pop(dk, None)
                    data.put_raw(dk, raw)
                return [(self._at_window, value)]
            raw = data.raw(dk)  # in an undoable unit: written now, so taking back is exact
            value = fn(initial if raw is None else loads(raw))
            data.put_raw(dk, dumps(value))
            return [(self._at_window, value)]
        out = []
        for start in self.spec.starts(t):
            if closed is not None and start <= closed:
                continue
            dk = _DATA + _START.pack(start + _SHIFT) + k
            raw = data.raw(dk)
            value = fn(initial if raw is None else loads(raw))
            data.put_raw(dk, dumps(value))
            out.append((self.window(start), value))
        if not out:
            self.late = True
        return out

    def fetch(self, key: bytes | str, from_ms: int, to_ms: int) -> Iterator[tuple[Window, V]]:
        """(window, value) of ``key`` for the open windows starting in ``[from_ms, to_ms]``
        and no later than the window holding the stream time, in start order."""
        k, loads, step = store_key(key), self._serde.loads, self.spec.advance_ms
        lowest = from_ms + (-from_ms) % step  # the first window start at or after from_ms
        if self.closed is not None:
            lowest = max(lowest, self.closed + step)
        highest = min(to_ms, self.spec.starts(self._now)[-1])
        for s in range(lowest, highest + 1, step):
            if self._values:  # (an update between two steps included)
                self._write_values()
            raw = self._data.get(data_key(s, k))
            if raw is not None:
                yield self.window(s), loads(raw)

    # --- the partition's stream time (``Windows``) --------------------------------------

    def advance(self, t: int, offset: int = 0) -> int | None:
        """Take the record's event time ``t``: stream time moves up to it. Returns the last
        window closed before (None if none). (``offset``: the record's, unused here.)"""
        self.time, self.late = t, False
        layers = self._layers
        if self._generation != layers.generation:  # writes dropped or taken back
            self._reread()
        before = self.closed
        if t > self._now:
            self._now = t
            if layers.undo is not None:  # in an undoable unit: written now, so that taking
                self._data.put_raw(TIME_KEY, _TIME.pack(t))  # back part of it is exact
            else:
                self._time_held = True
                if self._deferred_in is not layers.deferred:
                    self._deferred_in = layers.deferred
                    layers.defer(self)
            if t >= self._edge:  # a window closes
                self._close_through(t)
        return before

    def _reread(self) -> None:
        """The stream time as the store has it (an abort, a record taken back, a fresh
        handle)."""
        raw = self._data.raw(TIME_KEY)
        now = NO_TIME if raw is None else _TIME.unpack(raw)[0]
        if now != self._now:
            self._close_through(now)
            self._now = now
        self._generation = self._layers.generation
        self._deferred_in = None
        self._time_held = False
        self._values = {}  # held for writes that were dropped (made ones are gone already)

    def write_deferred(self) -> None:
        """(``Layers``) The stream time and the values held, into the open layer."""
        if self._time_held:
            self._data.put_raw(TIME_KEY, _TIME.pack(self._now))
            self._time_held = False
        if self._values:
            self._write_values()
        self._deferred_in = None

    def _write_values(self) -> None:
        """The values ``update`` holds, serialized into the open layer (before any other
        read or write of the store: they are its latest) -- unless the layers' writes
        were dropped since: then they go too."""
        if self._generation != self._layers.generation:
            self._reread()
            return
        put, dumps = self._data.put_raw, self._serde.dumps
        for dk, value in self._values.items():
            put(dk, dumps(value))
        self._values = {}

    def _close_through(self, stream_time: int) -> None:
        """The last window closed at ``stream_time``, and the stream time at which the
        next one closes (``_edge``): closing is then computed per window, not per record."""
        closed = self.closed = self.spec.closed_through(stream_time)
        spec = self.spec
        self._edge = (
            NO_TIME if closed is None else closed + spec.advance_ms + spec.size_ms + spec.grace_ms
        )

    def closing(self, before: int | None) -> list[tuple[Window, bytes, Any]]:
        """The windows that closed since ``before`` (``advance``'s answer): (window, key,
        value) in start then key order, deleted from the store as they are listed."""
        through = self.closed
        if through is None or (before is not None and through <= before):
            return []
        hi = _DATA + _START.pack(through + 1 + _SHIFT)
        # from past the windows closed before: theirs are deletes, which a RocksDB scan
        # from the family's start would step over, all of them, at every close
        lo = _DATA if before is None else _DATA + _START.pack(before + 1 + _SHIFT)
        if self._values:
            self._write_values()
        found = list(self._data.range(lo, hi))
        loads, out = self._serde.loads, []
        for dk, raw in found:
            (shifted,) = _START.unpack_from(dk, 1)
            out.append((self.window(shifted - _SHIFT), dk[1 + _START.size :], loads(raw)))
            self._data.delete(dk)
        return out


PYTHON_PATH: dict[str, Callable[..., Any]] = {
    name: WindowStore.__dict__[name] for name in ("update", "advance")
}
"""``WindowStore.update`` and ``advance`` in Python: what runs without the compiled
extension, what the compiled ones hand every case but their hot paths to, and what they
are held to (``tests/unit/test_native_window.py``)."""


def _compile() -> None:
    """The compiled ``update`` and ``advance`` (``eosflow._native.bind_window``) in place
    of the Python ones, where the extension is built: their hot paths -- a record's time
    taken, a tumbling window's update of the window the last one wrote -- outside an
    undoable unit, with the slots read and written at their offsets; every other case
    goes to ``PYTHON_PATH``."""
    compiled = bind_window(WindowStore, PYTHON_PATH)
    if compiled is not None:
        for name, function in compiled.items():
            setattr(WindowStore, name, named_as(function, PYTHON_PATH[name]))


_compile()


def event_time(processor: Any, record: Record) -> int:
    """The record's event time in milliseconds: ``processor.timestamp(record)``."""
    t = processor.timestamp(record)
    if type(t) is not int:
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            raise TypeError(
                f"{type(processor).__name__}.timestamp() returned {t!r}; expected "
                "milliseconds (an int)"
            )
        t = int(t)
    return t
