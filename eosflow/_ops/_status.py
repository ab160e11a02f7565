"""``eosflow status``: each partition of a group's topics with its committed offset,
last stable offset, lag and the member holding it -- the broker's view, from outside
the app, against any Kafka (DescribeGroups, OffsetFetch, ListOffsets).

Lag is the last stable offset minus the committed offset (read_committed ListOffsets): a
transaction left open on the input does not count as lag, as the high watermark would
make it. Where nothing readable lies between the two (commit markers, aborted records:
every transaction ends with a marker after its last record), the lag is 0; otherwise the
markers among the records behind are counted too. A partition with nothing committed
shows ``-`` for its offset and lag, as Kafka's own ``kafka-consumer-groups`` does. The
topics are those the group committed offsets for or its members hold. Given a
pipeline's stages (``eosflow status ... module:Pipeline``), the lag is also summed per
stage, over the topics each stage reads (sources or earlier stages' repartition topics).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from .. import _aiokafka as ak
from .._checks import partitions_of
from .._errors import ConfigError
from .._records import Partition
from .._security import KafkaSecurity
from ._progress import stage_lag, stages_of


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    committed: int | None
    last_stable: int
    member: str | None  # "client_id@host (member id)"
    lag: int | None  # None: nothing committed


@dataclass(frozen=True)
class GroupStatus:
    group_id: str
    state: str
    protocol: str
    members: int
    partitions: tuple[PartitionStatus, ...]
    clients: tuple[str, ...] = ()  # the members' client ids

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    def stage_lag(self, stages: Mapping[str, Iterable[str]]) -> dict[str, int]:
        """A pipeline's lag per stage (``stages``: each stage's topics, as
        ``Plan.inputs`` gives them): the sum over the partitions of the topics it reads,
        as the app's ``eosflow_stage_lag`` gauge and progress line count it."""
        lag = {(p.topic, p.partition): p.lag or 0 for p in self.partitions}
        return stage_lag(lag, stages_of(stages))

    def table(self, stages: Mapping[str, Iterable[str]] | None = None) -> str:
        """The report: a header line, ``lag by stage`` where ``stages`` are given, and
        one row per partition."""
        head = (
            f"group {self.group_id}: {self.state}, {self.members} member(s)"
            f"{', assignor ' + self.protocol if self.protocol else ''}, total lag {self.lag:,}"
        )
        if stages is not None:
            by = ", ".join(f"{s} {n:,}" for s, n in self.stage_lag(stages).items())
            head += f"\nlag by stage: {by}"
        rows = [("TOPIC", "PARTITION", "COMMITTED", "LAST-STABLE", "LAG", "MEMBER")]
        for p in self.partitions:
            rows.append(
                (
                    p.topic,
                    str(p.partition),
                    "-" if p.committed is None else str(p.committed),
                    str(p.last_stable),
                    "-" if p.lag is None else str(p.lag),
                    p.member or "-",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        return "\n".join([head, *(line.rstrip() for line in lines)])


async def group_status(
    bootstrap_servers: str, group_id: str, security: KafkaSecurity | None = None
) -> GroupStatus:
    security = security or KafkaSecurity()
    view = await ak.describe_group(bootstrap_servers, security, group_id)
    holder: dict[Partition, str] = {}
    for m in view.members:
        for tp in m.partitions:
            holder[tp] = f"{m.client_id}@{m.host.lstrip('/')} ({m.member_id})"
    topics = sorted({t for t, _ in view.committed} | {t for t, _ in holder})
    if not topics:
        raise ConfigError(
            f"group {group_id!r} has no committed offsets and no members holding partitions "
            f"on {bootstrap_servers} (state {view.state})"
        )
    ends, caught_up = await _last_stable_offsets(
        bootstrap_servers, security, topics, view.committed
    )
    rows = []
    for tp, end in sorted(ends.items()):
        at = view.committed.get(tp)
        lag = None if at is None else 0 if tp in caught_up else max(0, end - at)
        rows.append(PartitionStatus(tp[0], tp[1], at, end, holder.get(tp), lag))
    clients = tuple(m.client_id for m in view.members)
    return GroupStatus(group_id, view.state, view.protocol, len(view.members), tuple(rows), clients)


async def member_transactions(
    bootstrap_servers: str, security: KafkaSecurity, clients: Iterable[str]
) -> dict[str, ak.TxnView] | None:
    """The transactional ids of a group's eosflow members, by member client id, as their
    coordinators hold them (None: a broker before Kafka 3.0 does not tell). An eosflow
    member's client id is ``<client id>-<transactional id>-<start, µs>`` (``EosConfig
    .client_id``); neither part is known from outside, and both may hold dashes, so
    every dash-separated tail of what precedes the start is asked and the longest one
    the coordinators know is the member's. A member without such an id (another
    client, an eosflow instance before its first transaction) is left out."""
    tails: dict[str, list[str]] = {}
    for client in clients:
        member = ak.member_id_parts(client)
        if member is not None:
            parts = member[0].split("-")
            tails[client] = ["-".join(parts[i:]) for i in range(1, len(parts))]
    if not tails:
        return {}
    known = await ak.describe_transactions(
        bootstrap_servers, security, [t for ts in tails.values() for t in ts]
    )
    if known is None:
        return None
    out = {}
    for client, ts in tails.items():
        longest = next((t for t in ts if t in known), None)
        if longest is not None:
            out[client] = known[longest]
    return out


async def _last_stable_offsets(
    bootstrap_servers: str,
    security: KafkaSecurity,
    topics: list[str],
    committed: dict[Partition, int],
) -> tuple[dict[Partition, int], set[Partition]]:
    """Each partition's last stable offset, and the partitions caught up although short
    of it: no committed record lies between the group's committed offset and it, only
    commit markers and aborted records (every transaction ends with a marker after its
    last record, so a caught-up group's offset is one short of it)."""
    tps = [
        TopicPartition(t, p)
        for t in topics
        for p in await partitions_of(bootstrap_servers, t, security)
    ]
    consumer = ak.plain_consumer(bootstrap_servers, security, isolation_level="read_committed")
    await ak.start(consumer, _Where(bootstrap_servers, security), "listing offsets", "READ")
    try:
        with ak.mapped("listing the last stable offsets", "DESCRIBE"):
            ends = {
                (tp.topic, tp.partition): int(off)
                for tp, off in (await consumer.end_offsets(tps)).items()
            }
        behind = {tp: off for tp, off in committed.items() if ends.get(tp, off) > off}
        with ak.mapped("reading past the committed offsets", "READ"):
            caught_up = set(await _nothing_readable(consumer, behind, ends))
        return ends, caught_up
    finally:
        await ak.close_consumer(consumer, timeout_s=10.0)


async def _nothing_readable(
    consumer: AIOKafkaConsumer, start: dict[Partition, int], ends: dict[Partition, int]
) -> list[Partition]:
    """The partitions of ``start`` where read_committed finds no record before ``ends``
    (a few fetches each, a 10 s budget in all)."""
    if not start:
        return []
    tps = {TopicPartition(*tp): tp for tp in start}
    consumer.assign(list(tps))
    for tp, key in tps.items():
        consumer.seek(tp, start[key])
    open_ = set(tps)
    found: set[Partition] = set()
    deadline = time.monotonic() + 10.0
    while open_ and time.monotonic() < deadline:
        batch = await consumer.getmany(*open_, timeout_ms=500)
        for tp, records in batch.items():
            if any(r.offset < ends[tps[tp]] for r in records):
                found.add(tps[tp])
                open_.discard(tp)
        for tp in list(open_):
            if await consumer.position(tp) >= ends[tps[tp]]:
                open_.discard(tp)
    return [key for tp, key in tps.items() if key not in found and tp not in open_]


@dataclass(frozen=True)
class _Where:
    bootstrap_servers: str
    security: KafkaSecurity
