"""Checking a stateful run from the outside: what a store's committed changelog says.

``check_state`` folds a store's changelog as read_committed readers (and a restore) see
it -- each key's last write, a tombstone removing it -- and compares the result with the
state the input should have produced. It also checks what a visible aborted write would
break: per changelog partition, the position records (eosflow's ``RESERVED_KEY``, one
per committed transaction) must grow strictly, since a transaction that committed after
an abort consumed past it. The records only a read_uncommitted reader sees are counted
as ``aborted_writes``: present in the log, never part of the state.

``check_counts`` is the whole check of a running count (``examples/counting.py``): the
final count of every key equals its number of input records, each key's outputs are
exactly 1, 2, ..., n, and the group's offsets reached the input's end.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._security import KafkaSecurity
from .._state import BYTES, RESERVED_KEY, Serde, decode_position
from ._checker import offsets_behind, read_records, read_topic


@dataclass
class StateReport:
    expected: int  # keys expected to hold a value
    found: int  # keys holding a value in the committed changelog
    wrong: dict[bytes, tuple[Any, Any]] = field(default_factory=dict)  # key: (expected, found)
    missing: list[bytes] = field(default_factory=list)
    extra: list[bytes] = field(default_factory=list)
    position_regressions: list[str] = field(default_factory=list)
    aborted_writes: int = 0  # changelog records of aborted transactions (never visible)
    # for check_counts: keys whose outputs are not exactly 1..n, and offsets not at the end
    bad_outputs: dict[bytes, list[int]] = field(default_factory=dict)
    offsets_behind: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (
            self.wrong
            or self.missing
            or self.extra
            or self.position_regressions
            or self.bad_outputs
            or self.offsets_behind
        )

    def summary(self) -> str:
        verdict = "STATE EXACTLY ONCE: OK" if self.ok else "STATE EXACTLY ONCE: FAILED"
        lines = [
            f"{verdict} -- {self.expected} keys expected, {self.found} in the changelog, "
            f"{len(self.wrong)} wrong, {len(self.missing)} missing, {len(self.extra)} extra; "
            f"{self.aborted_writes} aborted changelog writes, none visible"
            if not self.position_regressions
            else f"{verdict} -- position records regress: {self.position_regressions[:5]}"
        ]
        if self.wrong:
            lines.append(f"  wrong (first 10): {list(self.wrong.items())[:10]}")
        if self.missing:
            lines.append(f"  missing (first 10): {self.missing[:10]}")
        if self.extra:
            lines.append(f"  extra (first 10): {self.extra[:10]}")
        if self.bad_outputs:
            lines.append(f"  outputs not 1..n (first 5): {list(self.bad_outputs.items())[:5]}")
        for tp, behind in self.offsets_behind.items():
            lines.append(f"  committed offset of {tp} is {behind} behind the end")
        return "\n".join(lines)


async def check_state(
    bootstrap: str,
    changelog_topic: str,
    expected: Mapping[bytes, Any],
    *,
    serde: Serde = BYTES,
    security: KafkaSecurity | None = None,
) -> StateReport:
    """Compare the committed state in ``changelog_topic`` with ``expected`` (key ->
    value, as the store's ``serde`` loads it)."""
    committed = await read_records(bootstrap, changelog_topic, security=security)
    everything = await read_records(
        bootstrap, changelog_topic, committed_only=False, security=security
    )
    state: dict[bytes, bytes] = {}
    last_position: dict[int, int | None] = {}
    report = StateReport(expected=len(expected), found=0)
    for r in committed:
        if r.key == RESERVED_KEY:
            position = decode_position(r.value)
            before = last_position.get(r.partition)
            if before is not None and (position is None or position <= before):
                report.position_regressions.append(
                    f"{changelog_topic}[{r.partition}]@{r.offset}: {position} after {before}"
                )
            last_position[r.partition] = position
        elif r.key is not None:
            if r.value is None:
                state.pop(r.key, None)
            else:
                state[r.key] = r.value
    report.aborted_writes = len(everything) - len(committed)
    report.found = len(state)
    for key, want in expected.items():
        raw = state.get(key)
        if raw is None:
            report.missing.append(key)
        elif (got := serde.loads(raw)) != want:
            report.wrong[key] = (want, got)
    report.extra = sorted(k for k in state if k not in expected)
    report.missing.sort()
    return report


async def check_counts(
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    changelog_topic: str,
    *,
    group_id: str | None = None,
    serde: Serde | None = None,
    security: KafkaSecurity | None = None,
) -> StateReport:
    """The check of a running count per input key (``examples/counting.py``): the
    committed state equals each key's number of input records, each key's committed
    outputs are exactly the counts 1..n (none lost, none twice), and ``group_id``'s
    offsets reached the input's end."""
    from .._state import JSON

    inputs = await read_topic(bootstrap, input_topic, security=security)
    want = Counter(key or b"" for _p, _o, key, _v in inputs)
    report = await check_state(
        bootstrap, changelog_topic, dict(want), serde=serde or JSON, security=security
    )
    seen: dict[bytes, list[int]] = defaultdict(list)
    for _p, _o, key, value in await read_topic(bootstrap, output_topic, security=security):
        seen[key or b""].append(int(value or b"-1"))
    for key in sorted(set(want) | set(seen)):
        counts = sorted(seen.get(key, []))
        if counts != list(range(1, want.get(key, 0) + 1)):
            report.bad_outputs[key] = counts[:20]
    if group_id is not None:
        after_last: dict[int, int] = {}
        for part, offset, _k, _v in inputs:
            after_last[part] = max(after_last.get(part, 0), offset + 1)
        report.offsets_behind = await offsets_behind(
            bootstrap, input_topic, group_id, after_last, security
        )
    return report
