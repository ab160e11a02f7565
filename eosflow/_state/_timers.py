"""Event-time timers: ``Timer`` and ``TimerStore`` (what ``Processor.timers`` gives).

A processor that overrides ``fire`` has timers: ``self.timers.at(time_ms, key,
payload)`` sets ``key``'s timer (one per key; setting it again moves it), ``cancel(key)``
removes it. A timer fires once its partition's stream time (``_windows``: the largest
event time processed there) reaches its time: after the ``process`` of the record that
moved stream time there (and after the windows it closed), ``fire(timer)`` is called
for each due timer, in time then key order, and what it returns is produced in that
record's transaction, which also deletes the timer. So a timer fires exactly once in
the committed output, across crashes, rebalances and zombies: its deletion and its
outputs commit or abort together, and a restore brings back the timers still pending.
A timer set for a time stream time has already reached fires after the record that set
it; one set from ``fire`` for such a time, after the next record.

Timers are kept in a store named ``timers`` (so no store or window may take that name),
with the same local copy, changelog and restore as every store, under two key families:
``b"t" + time (8 bytes, order-preserving) + key`` -> payload, the firing order, and
``b"k" + key`` -> time, to move or cancel a key's timer; the stream time under
``TIME_KEY``.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from ._store import Store, store_key
from ._windows import NO_TIME, TIME_KEY, read_time

STORE = "timers"
_AT = struct.Struct(">Q")  # a timer's time, shifted by 2**63 so byte order = number order
_SHIFT = 2**63
_TIME = struct.Struct(">q")


class Timer(NamedTuple):
    """One timer: ``key``'s, due at event time ``time_ms``, with the ``payload`` it was
    set with."""

    key: bytes
    time_ms: int
    payload: bytes


def _due_key(time_ms: int, key: bytes) -> bytes:
    return b"t" + _AT.pack(time_ms + _SHIFT) + key


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
        """Set ``key``'s timer to fire at event time ``time_ms`` (replacing any it had)."""
        if type(time_ms) is not int:
            raise TypeError(f"timers.at(): time_ms is milliseconds (an int), not {time_ms!r}")
        k = store_key(key)
        body = payload.encode() if isinstance(payload, str) else bytes(payload)
        self.cancel(k)
        self._data.put(b"k" + k, _TIME.pack(time_ms))
        self._data.put(_due_key(time_ms, k), body)

    def get(self, key: bytes | str) -> Timer | None:
        """``key``'s pending timer, if it has one."""
        k = store_key(key)
        raw = self._data.get(b"k" + k)
        if raw is None:
            return None
        (time_ms,) = _TIME.unpack(raw)
        payload = self._data.get(_due_key(time_ms, k))
        return Timer(k, time_ms, payload or b"")

    def cancel(self, key: bytes | str) -> bool:
        """Remove ``key``'s timer; False if it had none."""
        k = store_key(key)
        raw = self._data.get(b"k" + k)
        if raw is None:
            return False
        (time_ms,) = _TIME.unpack(raw)
        self._data.delete(b"k" + k)
        self._data.delete(_due_key(time_ms, k))
        return True

    # --- the partition's stream time (``Stores``) ---------------------------------------

    def advance(self, t: int) -> None:
        """Take a record's event time ``t``: stream time moves up to it."""
        now = read_time(self._data)
        if t > now:
            self._data.put(TIME_KEY, _TIME.pack(t))
            now = t
        self._now = now

    def due(self) -> list[Timer]:
        """The timers stream time has reached, in time then key order (each to ``take``
        before it fires: an earlier one's ``fire`` may have moved or cancelled it)."""
        if self._now == NO_TIME:
            return []
        hi = b"t" + _AT.pack(self._now + 1 + _SHIFT)
        found: list[tuple[bytes, Any]] = list(self._data.range(b"t", hi))
        out = []
        for dk, payload in found:
            (shifted,) = _AT.unpack_from(dk, 1)
            out.append(Timer(dk[1 + _AT.size :], shifted - _SHIFT, payload))
        return out

    def take(self, timer: Timer) -> bool:
        """Delete ``timer`` to fire it; False when it is no longer pending as it was."""
        raw = self._data.get(b"k" + timer.key)
        if raw is None or _TIME.unpack(raw)[0] != timer.time_ms:
            return False
        self._data.delete(b"k" + timer.key)
        self._data.delete(_due_key(timer.time_ms, timer.key))
        return True
