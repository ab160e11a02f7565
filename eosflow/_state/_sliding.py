"""Sliding windows (Kafka Streams' ``SlidingWindows``): ``Sliding`` and ``SlidingStore``
(what ``Processor.sliding(name)`` gives).

A sliding window is ``size_s`` long and placed by the records, not by the epoch: per key,
two records are in one window when their event times are at most ``size`` apart. Its
windows are, per key, for each record time ``x`` the window **ending at it**, ``[x -
size, x]``, and, when later records of the key come within ``size`` after it, the window
**starting just after it**, ``[x + 1, x + 1 + size]`` -- both ends inclusive, in
milliseconds. (``Window.end_ms`` is exclusive, as for every window: ``x + 1``.) Each
distinct window is emitted once.

In ``process``, ``self.sliding(name).add(key, value)`` puts the record's contribution
(``value``, through the spec's serde) into its key's windows. **Final results only**: a
window closes once its partition's stream time passes its end plus the grace (``end +
grace < stream time``), and ``closed(key, window, values)`` gets the list of the
contributions in it, in event-time order (then input order), in the transaction of the
record whose time closed it, which also deletes what no open window needs. A record whose
own window ``[t - size, t]`` had closed is late: nothing changes, and it is counted or
dead-lettered as for other windows. Windows close in end order, then key order.

Stored per input partition in an ordinary store (same local copy, changelog and restore):
each contribution under ``b"k" + key (length-prefixed) + time + offset`` -> value, and
its time under ``b"i" + time + key + offset`` for closing and expiry in time order; the
stream time under ``TIME_KEY``. A close scans only the contributions whose time is a
closing window's end, or its start minus one (a window starting after a record), and then
each closing window's own key's contributions: O(records of the key in the window) a
window, the price of keeping contributions rather than one aggregate (``update`` of the
other windows).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ._sessions import key_part
from ._store import JSON, Serde, Store, store_key
from ._windows import NO_TIME, TIME_KEY, Window, durations_ms, read_time

V = TypeVar("V")
_T = struct.Struct(">Q")  # a time or an offset, shifted by 2**63: byte order = number order
_SHIFT = 2**63
_LEN = struct.Struct(">I")
_TIME = struct.Struct(">q")


@dataclass(frozen=True)
class Sliding:
    """Windows of ``size_s`` seconds placed by the records (see the module): per key, one
    ending at each record and one starting just after each record that later records of
    the key follow within ``size_s``. A window closes ``grace_s`` after its end in stream
    time; its final is the list of the contributions added to it. ``serde`` serializes
    the contributions (``eosflow.JSON`` by default)."""

    size_s: float
    grace_s: float = 0.0
    serde: Serde = JSON
    size_ms: int = field(init=False)
    grace_ms: int = field(init=False)

    def __post_init__(self) -> None:
        size, grace = durations_ms("Sliding", ("size_s", self.size_s), self.grace_s)
        object.__setattr__(self, "size_ms", size)
        object.__setattr__(self, "grace_ms", grace)

    def closed_through(self, stream_time: int) -> int | None:
        """The last window end (inclusive) closed at ``stream_time`` (None before the
        first record): every window ending at or before it."""
        if stream_time == NO_TIME:
            return None
        return stream_time - self.grace_ms - 1


def _t(v: int) -> bytes:
    return _T.pack(v + _SHIFT)


class SlidingStore(Generic[V]):
    """One sliding-windowed store of one input partition, as ``Processor.sliding(name)``
    gives it in ``process``. Contributions commit, abort and restore like a store's."""

    __slots__ = ("_data", "_now", "_serde", "closed", "late", "name", "offset", "spec", "time")

    def __init__(self, name: str, spec: Sliding, data: Store[bytes]) -> None:
        self.name, self.spec = name, spec
        self._serde, self._data = spec.serde, data
        self.time = NO_TIME  # the record's event time, set before process()
        self.offset = 0  # the record's offset: orders contributions of one time
        self._now = NO_TIME  # the partition's stream time
        self.closed: int | None = None  # windows ending at or before it are closed
        self.late = False

    def __repr__(self) -> str:
        topic, p = self._data.partition
        return f"<eosflow.SlidingStore {self.name!r} of {topic}[{p}]>"

    def add(self, key: bytes | str, value: V) -> bool:
        """Put the record's contribution ``value`` into ``key``'s windows; False (and
        nothing changes) when the record is late: its own window had closed. One
        contribution per key and record: adding again for it replaces the first."""
        t = self.time
        if self.closed is not None and t <= self.closed:
            self.late = True
            return False
        kp, at = key_part(store_key(key)), _t(t) + _t(self.offset)
        self._data.put(b"i" + _t(t) + kp + _t(self.offset), b"")
        self._data.put(b"k" + kp + at, self._serde.dumps(value))
        return True

    def values(self, key: bytes | str, start_ms: int, end_ms: int) -> list[V]:
        """``key``'s contributions with event times in ``[start_ms, end_ms]`` (both
        included) still kept, in event-time then input order."""
        return [v for _t_, v in self._between(key_part(store_key(key)), start_ms, end_ms)]

    def _between(self, kp: bytes, lo: int, hi: int) -> Iterator[tuple[int, Any]]:
        prefix, loads = b"k" + kp, self._serde.loads
        for dk, raw in self._data.range(prefix + _t(lo), prefix + _t(hi + 1)):
            (shifted,) = _T.unpack_from(dk, len(prefix))
            yield shifted - _SHIFT, loads(raw)

    # --- the partition's stream time (``EventTime``) ------------------------------------

    def advance(self, t: int, offset: int = 0) -> int | None:
        """Take the record's event time ``t`` (and offset): stream time moves up to it.
        Returns the last window end closed before (None if none)."""
        self.time, self.offset, self.late = t, offset, False
        now = read_time(self._data)
        before = self.spec.closed_through(now)
        if t > now:
            self._data.put(TIME_KEY, _TIME.pack(t))
            now = t
        self._now = now
        self.closed = self.spec.closed_through(now)
        return before

    def closing(self, before: int | None) -> list[tuple[Window, bytes, list[Any]]]:
        """The windows that closed since ``before`` (``advance``'s answer): (window, key,
        its contributions) in end then key order; the contributions no open window needs
        any more are deleted."""
        through, size = self.closed, self.spec.size_ms
        if through is None or (before is not None and through <= before):
            return []
        ends: set[tuple[int, bytes]] = set()  # (end, key part)
        # windows ending at a record: the records of times (before, through]
        for t, kp, _off in self._times(NO_TIME if before is None else before + 1, through):
            ends.add((t, kp))
        # windows starting just after a record y (end y + 1 + size in (before, through]),
        # when the key has a record in (y, end]; below through - size nothing is needed
        # any more: deleted once the windows are listed
        gone: list[tuple[int, bytes, int]] = []
        lo = NO_TIME if before is None else before - size
        for y, kp, off in self._times(lo, through - size - 1):
            end = y + 1 + size
            if (before is None or end > before) and next(self._between(kp, y + 1, end), None):
                ends.add((end, kp))
            gone.append((y, kp, off))
        out = []
        for end, kp in sorted(ends):
            values = [v for _x, v in self._between(kp, end - size, end)]
            out.append((Window(self.name, end - size, end + 1), kp[_LEN.size :], values))
        for y, kp, off in gone:
            self._data.delete(b"i" + _t(y) + kp + _t(off))
            self._data.delete(b"k" + kp + _t(y) + _t(off))
        return out

    def _times(self, lo: int, hi: int) -> Iterator[tuple[int, bytes, int]]:
        """(time, key part, offset) of the contributions with times in ``[lo, hi]``."""
        if hi < lo:
            return
        found = [dk for dk, _ in self._data.range(b"i" + _t(lo), b"i" + _t(hi + 1))]
        for dk in found:
            (shifted,) = _T.unpack_from(dk, 1)
            (off,) = _T.unpack_from(dk, len(dk) - _T.size)
            yield shifted - _SHIFT, dk[1 + _T.size : len(dk) - _T.size], off - _SHIFT
