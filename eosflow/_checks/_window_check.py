"""Checking a windowed run from the outside: the final results it should have emitted,
computed from the input alone, against what its output topic holds (read_committed).

``expected_windows`` replays the input as eosflow's windows see it: per input partition
in offset order, stream time the largest event time so far; a record goes into each of
its windows still open at that stream time (late, and counted, when none is); a window is
final once its partition's stream time reached its end plus the grace. Only windows
closed by the input's end have a final. Every key's records must be in one partition, as
keyed input is. Every input record counts: check a run whose processor dead-letters
none (a dead-lettered record's writes are taken back, its move of stream time too).

``check_windows`` compares: every expected final emitted exactly once with its value,
nothing else emitted. The output's records are read with ``decode`` (by default the
format of ``examples/clicks.py``: key = the window's key, value = JSON
``{"start_ms": ..., "end_ms": ..., "value": ...}``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .._records import Record
from .._security import KafkaSecurity
from .._state import Session, Sliding, WindowSpec
from ._checker import read_records

Final = tuple[bytes, int]  # (key, window start in ms)
Fold = Callable[[Any, Record], Any]
Merge = Callable[[Any, Any], Any]
Decode = Callable[[bytes | None, bytes | None], tuple[bytes, int, Any]]


def count(value: Any, record: Record) -> Any:
    """The fold of a count: one more."""
    return value + 1


def add(a: Any, b: Any) -> Any:
    """The merge of two sessions' counts."""
    return a + b


def decode_json(key: bytes | None, value: bytes | None) -> tuple[bytes, int, Any]:
    """A final as ``examples/clicks.py`` emits it: (key, start_ms, value)."""
    body = json.loads(value or b"null")
    return key or b"", int(body["start_ms"]), body["value"]


@dataclass
class WindowReport:
    expected: int  # finals the input should have produced
    found: int  # finals in the output (duplicates included)
    late: int  # input records late by the input alone (no window open for them)
    wrong: dict[Final, tuple[Any, Any]] = field(default_factory=dict)  # (expected, found)
    missing: list[Final] = field(default_factory=list)
    twice: dict[Final, int] = field(default_factory=dict)  # emitted more than once: times
    extra: list[Final] = field(default_factory=list)  # emitted, never expected

    @property
    def ok(self) -> bool:
        return not (self.wrong or self.missing or self.twice or self.extra)

    def summary(self) -> str:
        verdict = "WINDOWS EXACTLY ONCE: OK" if self.ok else "WINDOWS EXACTLY ONCE: FAILED"
        lines = [
            f"{verdict} -- {self.expected} finals expected, {self.found} emitted, "
            f"{len(self.wrong)} wrong, {len(self.missing)} missing, {len(self.twice)} twice, "
            f"{len(self.extra)} extra; {self.late} late input records"
        ]
        for name in ("wrong", "missing", "twice", "extra"):
            got = getattr(self, name)
            if got:
                first = list(got.items())[:10] if isinstance(got, dict) else got[:10]
                lines.append(f"  {name} (first 10): {first}")
        return "\n".join(lines)


def expected_windows(
    records: Iterable[Record],
    spec: WindowSpec | Session | Sliding,
    fold: Fold = count,
    initial: Any = 0,
    timestamp: Callable[[Record], int] | None = None,
    merge: Merge = add,
) -> tuple[dict[Final, Any], int]:
    """The finals (key, start) -> value that ``records`` (in offset order within each
    partition) give under ``spec``, and how many of them were late; ``merge`` joins two
    sessions' values (a record bridging them)."""
    time_of = timestamp or (lambda r: r.timestamp)
    if isinstance(spec, Session):
        return _expected_sessions(records, spec, fold, initial, time_of, merge)
    if isinstance(spec, Sliding):
        return _expected_sliding(records, spec, fold, initial, time_of)
    stream: dict[tuple[str, int], int] = {}
    values: dict[tuple[str, int], dict[Final, Any]] = {}
    late = 0
    for r in records:
        partition, t = (r.topic, r.partition), time_of(r)
        now = max(stream.get(partition, t), t)
        stream[partition] = now
        closed = spec.closed_through(now)
        held = values.setdefault(partition, {})
        open_starts = [s for s in spec.starts(t) if closed is None or s > closed]
        if not open_starts:
            late += 1
        for s in open_starts:
            k = (r.key or b"", s)
            held[k] = fold(held.get(k, initial), r)
    finals: dict[Final, Any] = {}
    for partition, held in values.items():
        closed = spec.closed_through(stream[partition])
        for (key, start), v in held.items():
            if closed is not None and start <= closed:
                finals[(key, start)] = v
    return finals, late


def _expected_sessions(
    records: Iterable[Record],
    spec: Session,
    fold: Fold,
    initial: Any,
    time_of: Callable[[Record], int],
    merge: Merge,
) -> tuple[dict[Final, Any], int]:
    """As ``expected_windows``, for session windows: a record joins the open sessions of
    its key within the gap of its time (merged in start order), or starts one."""
    stream: dict[tuple[str, int], int] = {}
    # per partition and key: its sessions as [start, end, value]
    sessions: dict[tuple[str, int], dict[bytes, list[list[Any]]]] = {}
    late, gap = 0, spec.gap_ms
    for r in records:
        partition, t, key = (r.topic, r.partition), time_of(r), r.key or b""
        now = stream[partition] = max(stream.get(partition, t), t)
        closed = now - gap - spec.grace_ms
        held = sessions.setdefault(partition, {}).setdefault(key, [])
        near = sorted(
            (s for s in held if s[1] > closed and s[1] >= t - gap and s[0] <= t + gap),
            key=lambda s: s[0],
        )
        start, end = min([t, *(s[0] for s in near)]), max([t, *(s[1] for s in near)])
        if end <= closed:
            late += 1
            continue
        value = initial if not near else near[0][2]
        for s in near[1:]:
            value = merge(value, s[2])
        for s in near:
            held.remove(s)
        held.append([start, end, fold(value, r)])
    finals: dict[Final, Any] = {}
    for partition, keys in sessions.items():
        closed = stream[partition] - gap - spec.grace_ms
        for key, held in keys.items():
            for start, end, value in held:
                if end <= closed:
                    finals[(key, start)] = value
    return finals, late


def _expected_sliding(
    records: Iterable[Record],
    spec: Sliding,
    fold: Fold,
    initial: Any,
    time_of: Callable[[Record], int],
) -> tuple[dict[Final, Any], int]:
    """Sliding windows as ``_sliding`` defines them, from the input alone: per key, a
    window ``[x - size, x]`` ending at each record time ``x`` and ``[y + 1, y + 1 +
    size]`` after each record ``y`` that a later record of the key follows within it; a
    record is late when its own window had closed; a window's value folds its records
    in event-time, then offset order."""
    size, late = spec.size_ms, 0
    stream: dict[tuple[str, int], int] = {}
    kept: dict[tuple[str, int], dict[bytes, list[tuple[int, int, Record]]]] = {}
    for r in records:
        partition, t = (r.topic, r.partition), time_of(r)
        now = max(stream.get(partition, t), t)
        stream[partition] = now
        closed = spec.closed_through(now)
        if closed is not None and t <= closed:
            late += 1
            continue
        kept.setdefault(partition, {}).setdefault(r.key or b"", []).append((t, r.offset, r))
    finals: dict[Final, Any] = {}
    for partition, keys in kept.items():
        closed = spec.closed_through(stream[partition])
        for key, items in keys.items():
            times = sorted({t for t, _o, _r in items})
            ends = set(times)
            ends.update(y + 1 + size for y in times if any(y < x <= y + 1 + size for x in times))
            for end in ends:
                if closed is None or end > closed:
                    continue
                value = initial
                for t, _o, r in sorted(items, key=lambda i: (i[0], i[1])):
                    if end - size <= t <= end:
                        value = fold(value, r)
                finals[(key, end - size)] = value
    return finals, late


async def check_windows(
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    spec: WindowSpec | Session | Sliding,
    *,
    fold: Fold = count,
    initial: Any = 0,
    merge: Merge = add,
    timestamp: Callable[[Record], int] | None = None,
    decode: Decode = decode_json,
    security: KafkaSecurity | None = None,
) -> WindowReport:
    """The check of a windowed processor with final results: what ``output_topic``
    holds (read_committed) against the finals ``input_topic`` gives under ``spec``,
    ``fold`` and ``initial`` (a count by default), with the processor's ``timestamp``
    when it overrides it."""
    inputs = [
        Record(r.topic, r.partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp)
        for r in await read_records(bootstrap, input_topic, security=security)
    ]
    inputs.sort(key=lambda r: (r.partition, r.offset))
    want, late = expected_windows(inputs, spec, fold, initial, timestamp, merge)
    outputs = await read_records(bootstrap, output_topic, security=security)
    emitted: Counter[Final] = Counter()
    got: dict[Final, Any] = {}
    for o in outputs:
        key, start, value = decode(o.key, o.value)
        emitted[(key, start)] += 1
        got[(key, start)] = value
    report = WindowReport(expected=len(want), found=len(outputs), late=late)
    for final, value in want.items():
        if final not in got:
            report.missing.append(final)
        elif got[final] != value:
            report.wrong[final] = (value, got[final])
    report.twice = {f: n for f, n in emitted.items() if n > 1}
    report.extra = sorted(f for f in got if f not in want)
    report.missing.sort()
    return report
