"""The exactly-once checker: does an output topic hold every input exactly once?

It reads both topics completely as a read_committed consumer and matches records by
key (``match="key"``: transforms that keep the key, e.g. enrichment) or by value
(``match="value"``: pass-through). Input identities must be unique. It reports losses
(inputs with no output), duplicates (inputs with more than one output) and strays
(outputs matching no input), and, given the group, whether its committed offsets reached
the input's end offsets.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

Match = Literal["key", "value"]


@dataclass
class CheckReport:
    inputs: int
    outputs: int
    lost: list[bytes] = field(default_factory=list)
    duplicated: dict[bytes, int] = field(default_factory=dict)
    strays: list[bytes] = field(default_factory=list)
    offsets_behind: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.strays or self.offsets_behind)

    def summary(self) -> str:
        verdict = "EXACTLY ONCE: OK" if self.ok else "EXACTLY ONCE: FAILED"
        lines = [
            f"{verdict} -- {self.inputs} inputs, {self.outputs} outputs, "
            f"{len(self.lost)} lost, {len(self.duplicated)} duplicated, "
            f"{len(self.strays)} strays"
        ]
        if self.lost:
            lines.append(f"  lost (first 10): {self.lost[:10]}")
        if self.duplicated:
            lines.append(f"  duplicated (first 10): {list(self.duplicated.items())[:10]}")
        if self.strays:
            lines.append(f"  strays (first 10): {self.strays[:10]}")
        for tp, behind in self.offsets_behind.items():
            lines.append(f"  committed offset of {tp} is {behind} behind the end")
        return "\n".join(lines)


async def read_topic(
    bootstrap: str, topic: str, *, committed_only: bool = True, timeout_s: float = 60.0
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of ``topic`` up to its end now: (partition, offset, key, value)."""
    parts = await _partitions(bootstrap, topic)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed" if committed_only else "read_uncommitted",
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[int, int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout_s
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} did not reach its end offsets {ends}")
            batch = await consumer.getmany(timeout_ms=200)
            for tp, recs in batch.items():
                out.extend((tp.partition, r.offset, r.key, r.value) for r in recs)
        return out
    finally:
        await consumer.stop()


async def _partitions(bootstrap: str, topic: str) -> list[int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        return sorted(await producer.partitions_for(topic))
    finally:
        await producer.stop()


async def check_exactly_once(
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    *,
    match: Match = "key",
    group_id: str | None = None,
) -> CheckReport:
    in_records = await read_topic(bootstrap, input_topic)
    out_records = await read_topic(bootstrap, output_topic)
    inputs = [r[2] if match == "key" else r[3] for r in in_records]
    outputs = [r[2] if match == "key" else r[3] for r in out_records]
    want = Counter(i for i in inputs if i is not None)
    if len(want) != len(inputs):
        raise ValueError(f"input identities ({match}) must be unique and not null")
    got = Counter(o for o in outputs if o is not None)
    report = CheckReport(inputs=len(inputs), outputs=len(outputs))
    report.lost = sorted(k for k in want if k not in got)
    report.duplicated = {k: n for k, n in got.items() if n > 1 and k in want}
    report.strays = sorted(k for k in got if k not in want)
    if group_id is not None:
        after_last: dict[int, int] = {}
        for part, offset, _, _ in in_records:
            after_last[part] = max(after_last.get(part, 0), offset + 1)
        report.offsets_behind = await _offsets_behind(bootstrap, input_topic, group_id, after_last)
    return report


async def _offsets_behind(
    bootstrap: str, topic: str, group_id: str, after_last: dict[int, int]
) -> dict[str, int]:
    """Partitions whose committed offset is short of the position after their last data
    record (commit markers after it are not data, so they need no committing)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        behind: dict[str, int] = {}
        for part, need in sorted(after_last.items()):
            committed = await consumer.committed(TopicPartition(topic, part)) or 0
            if committed < need:
                behind[f"{topic}[{part}]"] = need - committed
        return behind
    finally:
        await consumer.stop()
