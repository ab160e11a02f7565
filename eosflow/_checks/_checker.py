"""The exactly-once checker: does an output topic hold every input exactly once?

It reads both topics completely as a read_committed consumer -- once the transactions
open when it starts are decided (``read_records``) -- and matches records by
key (``match="key"``: transforms that keep the key, e.g. enrichment) or by value
(``match="value"``: pass-through). Input identities must be unique. It reports losses
(inputs with no output), duplicates (inputs with more than one output) and strays
(outputs matching no input), and, given the group, whether its committed offsets reached
the input's end offsets.

Given the dead-letter topic, an input found there counts as accounted for: eosflow's dead
letters name their input in the header ``eosflow.source`` (``topic/partition/offset``).
An input both in the output and dead-lettered (or dead-lettered twice) is a duplicate; a
dead letter naming the input topic but no input record of it is a stray; dead letters of
other input topics are left out.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from .. import _aiokafka as ak
from .._security import KafkaSecurity

Match = Literal["key", "value"]
# how long a read waits for the transactions open when it starts to be decided: a zombie's
# left open holds the last stable offset back until the broker times it out
SETTLE_S = 10.0
_SETTLE_POLL_S = 0.05
SOURCE_HEADER = "eosflow.source"  # set by eosflow's dead_letter(): b"topic/partition/offset"


@dataclass
class CheckReport:
    inputs: int
    outputs: int
    lost: list[bytes] = field(default_factory=list)
    duplicated: dict[bytes, int] = field(default_factory=dict)
    strays: list[bytes] = field(default_factory=list)
    offsets_behind: dict[str, int] = field(default_factory=dict)
    dead_lettered: int | None = None  # inputs found in the dead-letter topic, if checked

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.strays or self.offsets_behind)

    def summary(self) -> str:
        verdict = "EXACTLY ONCE: OK" if self.ok else "EXACTLY ONCE: FAILED"
        lines = [
            f"{verdict} -- {self.inputs} inputs, {self.outputs} outputs, "
            f"{len(self.lost)} lost, {len(self.duplicated)} duplicated, "
            f"{len(self.strays)} strays"
            + ("" if self.dead_lettered is None else f", {self.dead_lettered} dead-lettered")
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


@dataclass(frozen=True)
class _Where:
    bootstrap_servers: str
    given: KafkaSecurity | None

    @property
    def security(self) -> KafkaSecurity:
        return self.given or KafkaSecurity()


async def read_topic(
    bootstrap: str,
    topic: str,
    *,
    committed_only: bool = True,
    timeout_s: float = 60.0,
    security: KafkaSecurity | None = None,
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every record of ``topic`` up to its end now: (partition, offset, key, value)."""
    records = await read_records(
        bootstrap, topic, committed_only=committed_only, timeout_s=timeout_s, security=security
    )
    return [(r.partition, r.offset, r.key, r.value) for r in records]


async def read_records(
    bootstrap: str,
    topic: str,
    *,
    committed_only: bool = True,
    timeout_s: float = 60.0,
    security: KafkaSecurity | None = None,
    settle_s: float = SETTLE_S,
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topic`` up to its end now; ``committed_only``, to its last
    stable offset once every record written before the call is decided (``_settled``)."""
    parts = await partitions_of(bootstrap, topic, security)
    consumer = ak.plain_consumer(
        bootstrap,
        security,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed" if committed_only else "read_uncommitted",
    )
    await ak.start(consumer, _Where(bootstrap, security), f"reading {topic}", "READ")
    try:
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        if committed_only:
            ends = await _settled(consumer, tps, timeout_s, settle_s)
        else:
            ends = await consumer.end_offsets(tps)
        out: list[ConsumerRecord[bytes, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} did not reach its end offsets {ends}")
            batch = await consumer.getmany(timeout_ms=200)
            for recs in batch.values():
                out.extend(recs)
        return out
    finally:
        await ak.close_consumer(consumer, timeout_s=10.0)


async def _settled(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition], timeout_s: float, settle_s: float
) -> dict[TopicPartition, int]:
    """The last stable offsets once each reaches the high watermark of the start, within
    ``settle_s``: a committed transaction's records are readable only once its markers
    land, after its EndTxn was answered -- and after its consumed offsets may be read
    back (Kafka 4's group coordinator completes the offsets apart from the data
    partitions): a check right after the group committed everything would miss the
    last transaction's outputs. Past ``settle_s`` (a transaction left open), the last
    stable offsets as they are: what is committed so far."""
    written = await ak.log_offsets(consumer, tps, "latest", timeout_s, committed=False)
    deadline = time.monotonic() + settle_s
    while True:
        stable = await ak.log_offsets(consumer, tps, "latest", timeout_s)
        if all(stable[tp] >= written[tp] for tp in tps) or time.monotonic() >= deadline:
            return stable
        await asyncio.sleep(_SETTLE_POLL_S)  # polling the broker: markers land on its own


async def partitions_of(
    bootstrap: str, topic: str, security: KafkaSecurity | None = None
) -> list[int]:
    producer = ak.plain_producer(bootstrap, security)
    await ak.start(producer, _Where(bootstrap, security), f"metadata of {topic}", "READ")
    try:
        return sorted(await producer.partitions_for(topic))
    finally:
        await ak.close_producer(producer, timeout_s=10.0)


async def check_exactly_once(
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    *,
    match: Match = "key",
    group_id: str | None = None,
    dead_letter_topic: str | None = None,
    security: KafkaSecurity | None = None,
) -> CheckReport:
    in_records = await read_topic(bootstrap, input_topic, security=security)
    out_records = await read_topic(bootstrap, output_topic, security=security)
    inputs = [r[2] if match == "key" else r[3] for r in in_records]
    outputs = [r[2] if match == "key" else r[3] for r in out_records]
    want = Counter(i for i in inputs if i is not None)
    if len(want) != len(inputs):
        raise ValueError(f"input identities ({match}) must be unique and not null")
    got = Counter(o for o in outputs if o is not None)
    report = CheckReport(inputs=len(inputs), outputs=len(outputs))
    if dead_letter_topic is not None:
        by_offset = {(p, o): ident for (p, o, _, _), ident in zip(in_records, inputs, strict=True)}
        found, unmatched = await _dead_letters(
            bootstrap, dead_letter_topic, input_topic, by_offset, security
        )
        report.dead_lettered = len(set(found))
        got.update(found)
        report.strays.extend(unmatched)
    report.lost = sorted(k for k in want if k not in got)
    report.duplicated = {k: n for k, n in got.items() if n > 1 and k in want}
    report.strays = sorted([*report.strays, *(k for k in got if k not in want)])
    if group_id is not None:
        after_last: dict[int, int] = {}
        for part, offset, _, _ in in_records:
            after_last[part] = max(after_last.get(part, 0), offset + 1)
        report.offsets_behind = await offsets_behind(
            bootstrap, input_topic, group_id, after_last, security
        )
    return report


async def _dead_letters(
    bootstrap: str,
    topic: str,
    input_topic: str,
    by_offset: dict[tuple[int, int], bytes | None],
    security: KafkaSecurity | None,
) -> tuple[list[bytes], list[bytes]]:
    """The identities of the inputs of ``input_topic`` dead-lettered in ``topic``, and the
    source headers of its dead letters that name no input record (or are malformed)."""
    found: list[bytes] = []
    unmatched: list[bytes] = []
    for record in await read_records(bootstrap, topic, security=security):
        source = dict(record.headers).get(SOURCE_HEADER)
        parts = source.decode(errors="replace").rsplit("/", 2) if source else []
        if len(parts) == 3 and parts[0] != input_topic:
            continue  # the dead letter of another input topic
        ident = None
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            ident = by_offset.get((int(parts[1]), int(parts[2])))
        if ident is None:
            unmatched.append(source or f"{topic}/{record.partition}/{record.offset}".encode())
        else:
            found.append(ident)
    return found, unmatched


async def offsets_behind(
    bootstrap: str,
    topic: str,
    group_id: str,
    after_last: dict[int, int],
    security: KafkaSecurity | None,
) -> dict[str, int]:
    """Partitions whose committed offset is short of the position after their last data
    record (commit markers after it are not data, so they need no committing)."""
    consumer = ak.plain_consumer(
        bootstrap,
        security,
        group_id=group_id,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await ak.start(consumer, _Where(bootstrap, security), f"offsets of {group_id}", "READ")
    try:
        behind: dict[str, int] = {}
        for part, need in sorted(after_last.items()):
            committed = await consumer.committed(TopicPartition(topic, part)) or 0
            if committed < need:
                behind[f"{topic}[{part}]"] = need - committed
        return behind
    finally:
        await ak.close_consumer(consumer, timeout_s=10.0)
