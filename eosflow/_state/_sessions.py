"""Session windows: ``Session`` (the spec) and ``SessionStore`` (what
``Processor.window(name)`` gives for one).

A key's records whose event times lie within ``gap`` of each other form one session,
``[start, end]`` from its first record's time to its last's (``end_ms`` is inclusive,
unlike a tumbling window's). A record joins every session of its key it is within
``gap`` of -- bridging two sessions merges them -- or starts a new one. A session
**closes** once its partition's stream time (``_windows``) reaches ``end + gap + grace``:
no record can extend it any more, and late ones had their grace. Then, as for the other
windows, ``closed(key, window, value)`` gets its final value once, in the transaction
that deletes it. A record whose session would end up closed already is late.

Kept in the window's store under two key families: ``b"s" + key length (4 bytes) + key +
start`` -> end and the serialized value, to find a key's sessions; ``b"e" + end + key
length + key + start`` -> nothing, the closing order.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ._store import JSON, Serde, Store, store_key
from ._windows import NO_TIME, TIME_KEY, Window, durations_ms, read_time

V = TypeVar("V")
_T = struct.Struct(">Q")  # a time, shifted by 2**63 so byte order = number order
_SHIFT = 2**63
_LEN = struct.Struct(">I")
_TIME = struct.Struct(">q")
ENDS = b"e"  # the closing order's key family: one key a session (the console counts them)


@dataclass(frozen=True)
class Session:
    """Per key, records within ``gap_s`` seconds of each other in event time form one
    session; a session closes ``gap_s + grace_s`` after its last record in stream time.
    ``serde`` serializes the values (``eosflow.JSON`` by default)."""

    gap_s: float
    grace_s: float = 0.0
    serde: Serde = JSON
    gap_ms: int = field(init=False)
    grace_ms: int = field(init=False)

    def __post_init__(self) -> None:
        gap, grace = durations_ms("Session", ("gap_s", self.gap_s), self.grace_s)
        object.__setattr__(self, "gap_ms", gap)
        object.__setattr__(self, "grace_ms", grace)

    def closed_through(self, stream_time: int) -> int | None:
        """The last session end closed at ``stream_time`` (None before the first record)."""
        if stream_time == NO_TIME:
            return None
        return stream_time - self.gap_ms - self.grace_ms


def key_part(key: bytes) -> bytes:
    return _LEN.pack(len(key)) + key


class SessionStore(Generic[V]):
    """One session-windowed store of one input partition, as ``Processor.window(name)``
    gives it in ``process``. Its values commit, abort and restore like a store's; the
    sessions it offers are the open ones."""

    __slots__ = ("_data", "_now", "_serde", "closed", "late", "name", "spec", "time")

    def __init__(self, name: str, spec: Session, data: Store[bytes]) -> None:
        self.name, self.spec = name, spec
        self._serde, self._data = spec.serde, data
        self.time = NO_TIME  # the record's event time, set before process()
        self._now = NO_TIME  # the partition's stream time
        self.closed: int | None = None  # sessions ending at or before it are closed
        self.late = False

    def __repr__(self) -> str:
        topic, p = self._data.partition
        return f"<eosflow.SessionStore {self.name!r} of {topic}[{p}]>"

    def sessions(self, key: bytes | str) -> list[tuple[Window, V]]:
        """``key``'s open sessions, in start order."""
        return [(w, self._serde.loads(raw)) for w, raw in self._of(store_key(key))]

    def _of(self, key: bytes) -> list[tuple[Window, bytes]]:
        prefix = b"s" + key_part(key)
        hi = prefix + b"\xff" * (_T.size + 1)
        out = []
        for dk, raw in self._data.range(prefix, hi):
            (start,) = _T.unpack_from(dk, len(prefix))
            (end,) = _T.unpack_from(raw)
            out.append((Window(self.name, start - _SHIFT, end - _SHIFT), raw[_T.size :]))
        return out

    def update(
        self,
        key: bytes | str,
        fn: Callable[[V], V],
        initial: V,
        merge: Callable[[V, V], V] | None = None,
    ) -> list[tuple[Window, V]]:
        """Put the record into ``key``'s session: the sessions within ``gap`` of its event
        time, merged with ``merge`` when it bridges several (a count's: ``operator.add``),
        then ``fn`` applied to the value (``initial`` for a new session). Returns [(the
        session, its new value)], or [] when that session would already be closed (the
        record is late and nothing changes)."""
        k, t, gap, closed = store_key(key), self.time, self.spec.gap_ms, self.closed
        # within gap of t, and open: the record whose time closed a session (at exactly
        # end + gap, without grace) must not extend it before it is emitted
        near = [
            (w, raw)
            for w, raw in self._of(k)
            if t - gap <= w.end_ms
            and w.start_ms <= t + gap
            and (closed is None or w.end_ms > closed)
        ]
        start = min([t, *(w.start_ms for w, _ in near)])
        end = max([t, *(w.end_ms for w, _ in near)])
        if closed is not None and end <= closed:
            self.late = True
            return []
        loads = self._serde.loads
        if not near:
            value = initial
        else:
            value = loads(near[0][1])
            for _w, raw in near[1:]:
                if merge is None:
                    raise ValueError(
                        f"session window {self.name!r}: a record joins two sessions of "
                        f"{k!r}; pass update(..., merge=) to merge their values"
                    )
                value = merge(value, loads(raw))
        value = fn(value)
        for w, _raw in near:
            self._delete(k, w)
        self._data.put(_session_key(k, start), _T.pack(end + _SHIFT) + self._serde.dumps(value))
        self._data.put(_close_key(end, k, start), b"")
        return [(Window(self.name, start, end), value)]

    def _delete(self, key: bytes, w: Window) -> None:
        self._data.delete(_session_key(key, w.start_ms))
        self._data.delete(_close_key(w.end_ms, key, w.start_ms))

    # --- the partition's stream time (``EventTime``) ------------------------------------

    def advance(self, t: int, offset: int = 0) -> int | None:
        """Take the record's event time ``t``: stream time moves up to it. Returns the
        last session end closed before (None if none). (``offset``: unused here.)"""
        self.time, self.late = t, False
        now = read_time(self._data)
        before = self.spec.closed_through(now)
        if t > now:
            self._data.put(TIME_KEY, _TIME.pack(t))
            now = t
        self._now = now
        self.closed = self.spec.closed_through(now)
        return before

    def closing(self, before: int | None) -> list[tuple[Window, bytes, Any]]:
        """The sessions that closed since ``before``: (session, key, value) in end, then
        key, then start order, deleted as they are listed."""
        through = self.closed
        if through is None or (before is not None and through <= before):
            return []
        hi = ENDS + _T.pack(through + 1 + _SHIFT)
        # from past the sessions closed before: theirs are deletes, which a RocksDB scan
        # from the family's start would step over, all of them, at every close
        lo = ENDS if before is None else ENDS + _T.pack(before + 1 + _SHIFT)
        found = [dk for dk, _ in self._data.range(lo, hi)]
        out = []
        for ck in found:
            (n,) = _LEN.unpack_from(ck, 1 + _T.size)
            at = 1 + _T.size + _LEN.size
            key = ck[at : at + n]
            (start,) = _T.unpack_from(ck, at + n)
            raw = self._data.get(_session_key(key, start - _SHIFT))
            if raw is None:
                continue
            (end,) = _T.unpack_from(raw)
            w = Window(self.name, start - _SHIFT, end - _SHIFT)
            out.append((w, key, self._serde.loads(raw[_T.size :])))
            self._delete(key, w)
        return out


def _session_key(key: bytes, start: int) -> bytes:
    return b"s" + key_part(key) + _T.pack(start + _SHIFT)


def _close_key(end: int, key: bytes, start: int) -> bytes:
    return ENDS + _T.pack(end + _SHIFT) + key_part(key) + _T.pack(start + _SHIFT)
