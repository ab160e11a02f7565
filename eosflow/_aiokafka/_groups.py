"""A consumer group as the broker sees it, for ``eosflow status``: its members and what
each holds (DescribeGroups, the classic protocol's assignment decoded), and its
committed offsets (OffsetFetch). Any Kafka since 0.11 answers both.

Errors are mapped like every adapter call (``mapped``): an unknown group is no error
(DescribeGroups answers state ``Dead``, OffsetFetch nothing); a refused DESCRIBE on the
group is an ``AuthorizationError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

from .._errors import FatalError
from .._security import KafkaSecurity
from ._errors import error_for, map_error, mapped
from ._security import connection_settings

Partition = tuple[str, int]


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    partitions: tuple[Partition, ...]


@dataclass(frozen=True)
class GroupView:
    state: str
    protocol: str
    members: tuple[Member, ...]
    committed: dict[Partition, int]


async def describe_group(
    bootstrap_servers: str, security: KafkaSecurity, group_id: str
) -> GroupView:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers, **connection_settings(security)
    )
    with mapped(f"connecting to {bootstrap_servers}"):
        await admin.start()
    try:
        with mapped(f"describing group {group_id!r}"):
            answers = await admin.describe_consumer_groups([group_id])
            offsets = await admin.list_consumer_group_offsets(group_id)
    finally:
        await admin.close()
    group = answers[0].to_object()["groups"][0]
    if group["error_code"]:
        raise map_error(error_for(group["error_code"]), f"describing group {group_id!r}")
    members = []
    for m in group["members"]:
        held: list[Partition] = []
        if m["member_assignment"]:
            try:
                assignment = ConsumerProtocolMemberAssignment.decode(m["member_assignment"])
            except Exception as exc:  # a group of another protocol type (not a consumer)
                kind = group["protocol_type"]
                raise FatalError(
                    f"group {group_id!r} is not a consumer group ({kind!r}): {exc}"
                ) from None
            held = [(t, p) for t, parts in assignment.assignment for p in parts]
        members.append(Member(m["member_id"], m["client_id"], m["client_host"], tuple(held)))
    committed = {
        (tp.topic, tp.partition): meta.offset for tp, meta in offsets.items() if meta.offset >= 0
    }
    return GroupView(group["state"], group["protocol"], tuple(members), committed)
