"""``eosflow status``: each partition of a group's topics with its committed offset,
last stable offset, lag and the member holding it -- the broker's view, from outside
the app, against any Kafka (DescribeGroups, OffsetFetch, ListOffsets).

Lag is the last stable offset minus the committed offset (read_committed ListOffsets): a
transaction left open on the input does not count as lag, as the high watermark would
make it. A partition with nothing committed shows ``-`` for its offset and lag, as
Kafka's own ``kafka-consumer-groups`` does. The topics are those the group committed
offsets for or its members hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import TopicPartition

from .. import _aiokafka as ak
from .._checker import _partitions as partitions_of
from .._errors import ConfigError
from .._security import KafkaSecurity

Partition = tuple[str, int]


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    committed: int | None
    last_stable: int
    member: str | None  # "client_id@host (member id)"

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(0, self.last_stable - self.committed)


@dataclass(frozen=True)
class GroupStatus:
    group_id: str
    state: str
    protocol: str
    members: int
    partitions: tuple[PartitionStatus, ...]

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    def table(self) -> str:
        head = (
            f"group {self.group_id}: {self.state}, {self.members} member(s)"
            f"{', assignor ' + self.protocol if self.protocol else ''}, total lag {self.lag:,}"
        )
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
    ends = await _last_stable_offsets(bootstrap_servers, security, topics)
    rows = tuple(
        PartitionStatus(t, p, view.committed.get((t, p)), end, holder.get((t, p)))
        for (t, p), end in sorted(ends.items())
    )
    return GroupStatus(group_id, view.state, view.protocol, len(view.members), rows)


async def _last_stable_offsets(
    bootstrap_servers: str, security: KafkaSecurity, topics: list[str]
) -> dict[Partition, int]:
    tps = [
        TopicPartition(t, p)
        for t in topics
        for p in await partitions_of(bootstrap_servers, t, security)
    ]
    consumer = ak.plain_consumer(bootstrap_servers, security, isolation_level="read_committed")
    await ak.start(consumer, _Where(bootstrap_servers, security), "listing offsets", "READ")
    try:
        with ak.mapped("listing the last stable offsets", "DESCRIBE"):
            ends = await consumer.end_offsets(tps)
        return {(tp.topic, tp.partition): int(off) for tp, off in ends.items()}
    finally:
        await ak.close_consumer(consumer, timeout_s=10.0)


@dataclass(frozen=True)
class _Where:
    bootstrap_servers: str
    security: KafkaSecurity
