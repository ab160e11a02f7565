"""A consumer group as the broker sees it, for ``eosflow status``: its members and what
each holds, and its committed offsets (OffsetFetch, any Kafka since 0.11); a crashed
classic member removed on its behalf (``remove_member``, LeaveGroup); transactional ids
as their coordinators hold them, for the group's page (``describe_transactions``,
DescribeTransactions: Kafka 3.0+; None before).

Members come from ConsumerGroupDescribe (KIP-848, Kafka 4.0+) for a group of the consumer
protocol, else from DescribeGroups with the classic protocol's assignment decoded. The
former is asked first where the broker serves it; GROUP_ID_NOT_FOUND there ("not a
consumer group", or no group), or UNSUPPORTED_VERSION (a cluster whose ``group.version``
is 0 still lists the API), sends the question on to the latter. Genuine 4.4.0 answers
a DescribeGroups for a consumer-protocol group as ``Dead`` with no members, so asking it
alone would show a running group as gone.

Errors are mapped like every adapter call (``mapped``): an unknown group is no error
(DescribeGroups answers state ``Dead``, OffsetFetch nothing); a refused DESCRIBE on the
group is an ``AuthorizationError``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import (
    GroupCoordinatorNotAvailableError,
    IncompatibleBrokerVersion,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.protocol.group import LeaveGroupRequest

from .._errors import FatalError
from .._protocol import codes, specs, wire
from .._records import Partition
from .._security import KafkaSecurity
from ._errors import error_for, map_error, mapped
from ._security import connection_settings


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    partitions: tuple[Partition, ...]


@dataclass(frozen=True)
class TxnView:
    """A transactional id as its coordinator holds it (DescribeTransactions)."""

    transactional_id: str
    state: str  # Kafka's: Empty, Ongoing, PrepareCommit, CompleteCommit ...
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    started_ms: int  # the open transaction's start (epoch ms); -1: none open
    partitions: tuple[Partition, ...]  # in the open transaction, not yet marked


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
            node = await _coordinator(admin, group_id)
            modern = await _consumer_group(admin, node, group_id)
            answers = [] if modern else await admin.describe_consumer_groups([group_id], node)
            offsets = await admin.list_consumer_group_offsets(group_id)
    finally:
        await admin.close()
    committed = {
        (tp.topic, tp.partition): meta.offset for tp, meta in offsets.items() if meta.offset >= 0
    }
    if modern is not None:
        return GroupView(modern[0], modern[1], modern[2], committed)
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
    return GroupView(group["state"], group["protocol"], tuple(members), committed)


async def remove_member(
    bootstrap_servers: str, security: KafkaSecurity, group_id: str, member_id: str
) -> bool:
    """LeaveGroup (v0-1, one member id: aiokafka's, as its consumer leaves) on behalf of a
    classic-protocol member that cannot send it itself (a crashed one): the coordinator
    drops it and rebalances the rest. False when it no longer holds that member
    (UNKNOWN_MEMBER_ID: it left or expired meanwhile); other errors mapped."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers, **connection_settings(security)
    )
    with mapped(f"connecting to {bootstrap_servers}"):
        await admin.start()
    try:
        with mapped(f"removing member {member_id!r} from group {group_id!r}"):
            node = await _coordinator(admin, group_id)
            resp = await admin._client.send(node, LeaveGroupRequest(group_id, member_id))
    finally:
        await admin.close()
    code = int(resp.error_code)
    if code == codes.UNKNOWN_MEMBER_ID:
        return False
    if code:
        raise map_error(error_for(code), f"removing member {member_id!r} from {group_id!r}")
    return True


async def describe_transactions(
    bootstrap_servers: str, security: KafkaSecurity, ids: Iterable[str]
) -> dict[str, TxnView] | None:
    """``ids`` as their transaction coordinators hold them; an id a coordinator never saw
    (TRANSACTIONAL_ID_NOT_FOUND), or that this client may not DESCRIBE
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: a prefixed ACL covers some ids asked, not
    all), is left out. None where the brokers do not serve DescribeTransactions (before
    Kafka 3.0). Other errors mapped, as every call's; a coordinator that moved meanwhile
    (NOT_COORDINATOR) is such an error, for the caller to ask again."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap_servers, **connection_settings(security)
    )
    with mapped(f"connecting to {bootstrap_servers}"):
        await admin.start()
    found: dict[str, TxnView] = {}
    try:
        with mapped("describing transactions"):
            by_node: dict[int, list[str]] = {}
            for txn_id in sorted(set(ids)):
                try:
                    node = await _coordinator(admin, txn_id, 1)
                except TransactionalIdAuthorizationFailed:
                    continue  # FindCoordinator checks DESCRIBE on the id too
                by_node.setdefault(node, []).append(txn_id)
            for node, asked in by_node.items():
                body = {"transactional_ids": asked}
                try:
                    resp = await admin._client.send(
                        node, wire.SpecRequest.of(specs.DESCRIBE_TRANSACTIONS, body)
                    )
                except IncompatibleBrokerVersion:
                    return None  # before Kafka 3.0
                for t in resp.to_object()["transaction_states"]:
                    if t["error_code"] in _NOT_TOLD:
                        continue
                    if t["error_code"]:
                        what = f"describing transactional id {t['transactional_id']!r}"
                        raise map_error(error_for(t["error_code"]), what)
                    found[t["transactional_id"]] = TxnView(
                        t["transactional_id"],
                        t["transaction_state"],
                        t["producer_id"],
                        t["producer_epoch"],
                        t["transaction_timeout_ms"],
                        t["transaction_start_time_ms"],
                        tuple(
                            (tp["name"], p)
                            for tp in t["topic_partitions"]
                            for p in sorted(tp["partition_indexes"])
                        ),
                    )
    finally:
        await admin.close()
    return found


_NOT_TOLD = (codes.TRANSACTIONAL_ID_NOT_FOUND, codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


async def _coordinator(admin: AIOKafkaAdminClient, key: str, kind: int = 0) -> int:
    """The coordinator of a group (``kind`` 0) or a transactional id (1); a broker just
    started (or a coordinator not yet loaded) answers COORDINATOR_NOT_AVAILABLE for a
    moment: asked again for up to 10 s."""
    deadline = time.monotonic() + 10.0
    while True:
        try:
            return int(await admin.find_coordinator(key, kind))
        except GroupCoordinatorNotAvailableError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _consumer_group(
    admin: AIOKafkaAdminClient, node: int, group_id: str
) -> tuple[str, str, tuple[Member, ...]] | None:
    """(state, assignor, members) of a consumer-protocol group; None for a classic group,
    no group, or a broker without ConsumerGroupDescribe."""
    body = {"group_ids": [group_id], "include_authorized_operations": False}
    try:
        resp = await admin._client.send(
            node, wire.SpecRequest.of(specs.CONSUMER_GROUP_DESCRIBE, body)
        )
    except IncompatibleBrokerVersion:
        return None  # before Kafka 4.0
    (group,) = [g for g in resp.to_object()["groups"] if g["group_id"] == group_id]
    if group["error_code"] in (codes.GROUP_ID_NOT_FOUND, codes.UNSUPPORTED_VERSION):
        return None  # a classic group, none, or a cluster with the consumer protocol off
    if group["error_code"]:
        raise map_error(error_for(group["error_code"]), f"describing group {group_id!r}")
    members = tuple(
        Member(
            m["member_id"],
            m["client_id"],
            m["client_host"],
            tuple(
                (t["topic_name"], p)
                for t in m["assignment"]["topic_partitions"]
                for p in sorted(t["partitions"])
            ),
        )
        for m in group["members"]
    )
    return group["group_state"], group["assignor_name"], members
