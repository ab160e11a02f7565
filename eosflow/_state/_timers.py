"""Timers: ``Timer`` and ``TimerStore`` (what ``Processor.timers`` gives).

A processor that overrides ``fire`` has timers, of two kinds, one of each per key:

- **event time**: ``self.timers.at(time_ms, key, payload)``. It fires once its
  partition's stream time (``_windows``: the largest event time processed there) reaches
  its time: after the ``process`` of the record that moved stream time there (and after
  the windows it closed), ``fire(timer)`` is called for each due timer, in time then key
  order, and what it returns is produced in that record's transaction, which also
  deletes the timer. Deterministic: the same input fires the same timers at the same
  records. A timer set for a time stream time has already reached fires after the
  record that set it; one set from ``fire`` for such a time, after the next record.
- **wall clock**: ``self.timers.after(seconds, key, payload)``. It fires once the wall
  clock passes it, in a transaction of its own partition (``Stores.fire_clock``, asked
  by the engine at the end of every transaction and, while no records come, every
  ``commit_interval_s``): at most about ``commit_interval_s`` late while the instance
  runs, and soon after the partition's stores are restored when it was due during an
  outage. Not deterministic (it depends on when records were processed), but exactly
  once like the rest.

Either way a timer fires exactly once in the committed output, across crashes,
rebalances and zombies: its deletion and its outputs commit or abort together, and a
restore brings back the timers still pending. ``set``/``cancel`` are writes of the open
transaction: an abort takes them back.

Timers are kept in a store named ``timers`` (so no store or window may take that name),
with the same local copy, changelog and restore as every store, under key families:
``b"t" + time (8 bytes, order-preserving) + key`` -> payload, the event-time firing
order, and ``b"k" + key`` -> time, to move or cancel a key's timer; ``b"c"`` and ``b"K"``
the same for wall-clock timers; the stream time under ``TIME_KEY``; per family the time
below which none is pending (``_LOW``), where the next scan for due timers starts.
"""

from __future__ import annotations

import math
import struct
import time
from typing import Any, NamedTuple

from ._store import Store, store_key
from ._windows import NO_TIME, TIME_KEY, read_time

STORE = "timers"
_AT = struct.Struct(">Q")  # a timer's time, shifted by 2**63 so byte order = number order
_SHIFT = 2**63
_TIME = struct.Struct(">q")
# (the firing order's family, the key index's family) per kind
_EVENT = (b"t", b"k")
_CLOCK = (b"c", b"K")
# + a family: no timer of it is pending below this time (8 bytes). Firing scans from
# there, not from the family's start, where the fired timers' deletes lie: a RocksDB
# scan steps over every one of them, which made firing O(timers fired so far) a record.
_LOW = b"\x01eosflow.timers-low-"


class Timer(NamedTuple):
    """One timer: ``key``'s, due at ``time_ms`` -- event time, or with ``wall_clock``
    the wall clock's epoch milliseconds -- with the ``payload`` it was set with."""

    key: bytes
    time_ms: int
    payload: bytes
    wall_clock: bool = False


def wall_ms() -> int:
    """The wall clock, in epoch milliseconds."""
    return time.time_ns() // 1_000_000


class TimerStore:
    """The timers of one input partition, as ``Processor.timers`` gives them in
    ``process`` (and in ``fire``). Set, moved and cancelled in the open transaction:
    they commit, abort and restore with it."""

    __slots__ = ("_data", "_now")

    def __init__(self, data: Store[bytes]) -> None:
        self._data = data
        self._now = NO_TIME  # the partition's stream time

    def __repr__(self) -> str:
        topic, p = self._data.partition
        return f"<eosflow.TimerStore of {topic}[{p}]>"

    def at(self, time_ms: int, key: bytes | str, payload: bytes | str = b"") -> None:
        """Set ``key``'s event-time timer to fire at event time ``time_ms`` (replacing
        any it had)."""
        if type(time_ms) is not int:
            raise TypeError(f"timers.at(): time_ms is milliseconds (an int), not {time_ms!r}")
        self._set(_EVENT, time_ms, key, payload)

    def after(self, seconds: float, key: bytes | str, payload: bytes | str = b"") -> None:
        """Set ``key``'s wall-clock timer to fire ``seconds`` from now (replacing any
        it had; its event-time timer, if any, stays)."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"timers.after(): seconds is a number, not {seconds!r}")
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"timers.after(): seconds must be >= 0, not {seconds}")
        self._set(_CLOCK, wall_ms() + round(seconds * 1000), key, payload)

    def get(self, key: bytes | str, *, wall_clock: bool = False) -> Timer | None:
        """``key``'s pending timer of that kind, if it has one."""
        kind = _CLOCK if wall_clock else _EVENT
        k = store_key(key)
        raw = self._data.get(kind[1] + k)
        if raw is None:
            return None
        (time_ms,) = _TIME.unpack(raw)
        payload = self._data.get(_due_key(kind, time_ms, k))
        return Timer(k, time_ms, payload or b"", wall_clock)

    def cancel(self, key: bytes | str, *, wall_clock: bool = False) -> bool:
        """Remove ``key``'s timer of that kind; False if it had none."""
        return self._cancel(_CLOCK if wall_clock else _EVENT, store_key(key))

    def _set(self, kind: tuple[bytes, bytes], time_ms: int, key: bytes | str, payload: Any) -> None:
        k = store_key(key)
        body = payload.encode() if isinstance(payload, str) else bytes(payload)
        low = _LOW + kind[0]
        raw = self._data.get(low)
        if raw is not None and time_ms < _TIME.unpack(raw)[0]:
            self._data.put(low, _TIME.pack(time_ms))
        self._cancel(kind, k)
        self._data.put(kind[1] + k, _TIME.pack(time_ms))
        self._data.put(_due_key(kind, time_ms, k), body)

    def _cancel(self, kind: tuple[bytes, bytes], k: bytes) -> bool:
        raw = self._data.get(kind[1] + k)
        if raw is None:
            return False
        (time_ms,) = _TIME.unpack(raw)
        self._data.delete(kind[1] + k)
        self._data.delete(_due_key(kind, time_ms, k))
        return True

    # --- the partition's stream time and the wall clock (``EventTime``) ---------------

    def advance(self, t: int) -> None:
        """Take a record's event time ``t``: stream time moves up to it."""
        now = read_time(self._data)
        if t > now:
            self._data.put(TIME_KEY, _TIME.pack(t))
            now = t
        self._now = now

    def due(self) -> list[Timer]:
        """The event-time timers stream time has reached, in time then key order (each to
        ``take`` before it fires: an earlier one's ``fire`` may have moved or cancelled
        it)."""
        if self._now == NO_TIME:
            return []
        return self._due(_EVENT, self._now, False)

    def due_by_clock(self, now_ms: int, take: int | None = None) -> list[Timer]:
        """The wall-clock timers due at ``now_ms``, in time then key order: all of them,
        only looking, or the first ``take`` of them, each to ``take``."""
        return self._due(_CLOCK, now_ms, True, take)

    def _due(
        self, kind: tuple[bytes, bytes], now_ms: int, wall_clock: bool, take: int | None = -1
    ) -> list[Timer]:
        """The pending timers at or before ``now_ms`` (the first ``take`` of them; -1:
        all), each to be taken (or found moved); None: all, only looking. When all are
        to be taken none is left below ``now_ms + 1``: the new low bound (``_LOW``)."""
        family, low = kind[0], _LOW + kind[0]
        raw = self._data.get(low)
        lo = family if raw is None else family + _AT.pack(_TIME.unpack(raw)[0] + _SHIFT)
        hi = family + _AT.pack(now_ms + 1 + _SHIFT)
        out = []
        for dk, payload in self._data.range(lo, hi):
            (shifted,) = _AT.unpack_from(dk, 1)
            out.append(Timer(dk[1 + _AT.size :], shifted - _SHIFT, payload, wall_clock))
        if take is None or (take >= 0 and len(out) > take):
            return out if take is None else out[:take]  # some stay due: the bound stays
        if raw is None or _TIME.unpack(raw)[0] <= now_ms:
            self._data.put(low, _TIME.pack(now_ms + 1))
        return out

    def take(self, timer: Timer) -> bool:
        """Delete ``timer`` to fire it; False when it is no longer pending as it was."""
        kind = _CLOCK if timer.wall_clock else _EVENT
        raw = self._data.get(kind[1] + timer.key)
        if raw is None or _TIME.unpack(raw)[0] != timer.time_ms:
            return False
        self._data.delete(kind[1] + timer.key)
        self._data.delete(_due_key(kind, timer.time_ms, timer.key))
        return True


def _due_key(kind: tuple[bytes, bytes], time_ms: int, key: bytes) -> bytes:
    return kind[0] + _AT.pack(time_ms + _SHIFT) + key
