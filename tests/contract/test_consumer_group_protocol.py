"""The consumer group protocol (KIP-848) as the broker speaks it: eosflow's declaration
of ConsumerGroupHeartbeat (``_specs.CONSUMER_GROUP_HEARTBEAT``) and Metadata v12 (topic
ids) against the test cluster (``_groups_consumer``) and genuine Kafka 4.x
(``EOSFLOW_TEST_BROKER=genuine``); skipped where the broker lacks the protocol (2.4.1).

What eosflow's membership will rest on: assignment by topic id; a partition moves to a
new member only after its owner acknowledged the revocation, while the owner's other
partitions stay; the epoch rules (a stale epoch is fenced, the previous one tolerated
while the member owns no more than it is assigned); leaving.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from aiokafka.errors import GroupCoordinatorNotAvailableError
from kit import RawConn, client_needing, create_topic
from test_broker_answers import (
    ADD_OFFSETS,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    OFFSET_FETCH,
    TXN_OFFSET_COMMIT,
    retried,
)

from eosflow._protocol import _codes as codes
from eosflow._protocol import _specs, _wire
from eosflow.testing._ladder import Broker

Owned = dict[uuid.UUID, list[int]]


@pytest_asyncio.fixture
async def client(eosflow_broker: Broker) -> AsyncIterator[Any]:
    """An aiokafka client on the ladder's broker, which must have the consumer group protocol."""
    async with client_needing(
        eosflow_broker.bootstrap_servers, "kip848", "the consumer group protocol"
    ) as c:
        yield c


async def _coordinator(client: Any, group: str) -> int:
    """The group's coordinator; a fresh broker answers COORDINATOR_NOT_AVAILABLE until its
    offsets topic is ready."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return int(await client.coordinator_lookup(0, group))
        except GroupCoordinatorNotAvailableError:
            assert time.monotonic() < deadline, "no group coordinator within 30 s"
            await asyncio.sleep(0.2)


async def _topic_id(client: Any, topic: str) -> uuid.UUID:
    """The topic's id; a topic just created may not be in the broker's metadata yet
    (genuine Kafka answers UNKNOWN_TOPIC_OR_PARTITION for a moment)."""
    body = {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
    req = _wire.SpecRequest.of(_specs.METADATA, body)
    found: list[uuid.UUID] = []

    async def known() -> bool:
        resp = await client.send(client.get_random_node(), req)
        ((error, name, topic_id, *_),) = [t for t in resp.topics if t[1] == topic]
        if error == 0 and name == topic:
            found.append(uuid.UUID(str(topic_id)))
        return bool(found)

    await _until(f"topic {topic} in the metadata", known, timeout_s=10)
    return found[0]


@dataclass
class Member:
    """One consumer-protocol member driven by hand: ``beat`` sends a full heartbeat with
    what it owns (None: null, "unchanged") and keeps the epoch and assignment answered."""

    client: Any
    node: int
    group: str
    topic: str
    member_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    epoch: int = 0
    assigned: Owned = field(default_factory=dict)
    instance_id: str | None = None  # a static member's

    async def beat(self, owned: Owned | str | None = "assigned", epoch: int | None = None) -> Any:
        if owned == "assigned":
            owned = self.assigned
        body = {
            "group_id": self.group,
            "member_id": self.member_id,
            "member_epoch": self.epoch if epoch is None else epoch,
            "instance_id": self.instance_id,
            "rebalance_timeout_ms": 30_000,
            "subscribed_topic_names": [self.topic],
            "server_assignor": "uniform",
            "topic_partitions": None
            if owned is None
            else [{"topic_id": t, "partitions": sorted(ps)} for t, ps in owned.items()],  # type: ignore[union-attr]
        }
        req = _wire.SpecRequest.of(_specs.CONSUMER_GROUP_HEARTBEAT, body)
        resp = await self.client.send(self.node, req)
        if resp.error_code == 0 and epoch is None:
            self.epoch = resp.member_epoch
            if resp.assignment is not None:
                (pairs, _tags) = resp.assignment
                self.assigned = {uuid.UUID(str(t)): sorted(ps) for t, ps, _ in pairs}
        return resp

    def partitions(self) -> set[int]:
        return {p for ps in self.assigned.values() for p in ps}

    async def join_owning(self, partitions: set[int]) -> None:
        """Join, then heartbeat until the assignment is ``partitions``."""

        async def owns_them() -> bool:
            r = await self.beat()
            assert r.error_code == 0, r.error_message
            return self.partitions() == partitions

        await _until(f"{self.member_id} owns {sorted(partitions)}", owns_them)


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.1)


async def _members(client: Any, b: Broker, parts: int) -> tuple[str, str, int]:
    """A topic, a group and its coordinator, ready: on a fresh broker the coordinator
    FindCoordinator names may answer COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR while
    it loads the group's offsets partition. Asked with a member of no group until it
    answers GROUP_ID_NOT_FOUND, as a ready coordinator does (found again each time)."""
    topic, group = b.unique("cgh"), b.unique("cgh-group")
    await create_topic(b.bootstrap_servers, topic, parts)
    not_yet = {
        codes.COORDINATOR_LOAD_IN_PROGRESS,
        codes.NOT_COORDINATOR,
        codes.COORDINATOR_NOT_AVAILABLE,
    }
    deadline = time.monotonic() + 30
    while True:
        node = await _coordinator(client, group)
        probe = await Member(client, node, group, topic).beat(epoch=3)
        if probe.error_code == codes.GROUP_ID_NOT_FOUND:
            return topic, group, node
        assert probe.error_code in not_yet, codes.name(probe.error_code)
        assert time.monotonic() < deadline, f"coordinator not ready: {codes.name(probe.error_code)}"
        await asyncio.sleep(0.2)


async def test_a_member_joins_gets_every_partition_by_topic_id_and_leaves(
    eosflow_broker: Broker, client: Any
) -> None:
    topic, group, node = await _members(client, eosflow_broker, 3)
    topic_id = await _topic_id(client, topic)
    a = Member(client, node, group, topic)  # v1: the member makes its own id (KIP-1082)
    resp = await a.beat()
    assert resp.error_code == 0, resp.error_message
    assert resp.member_id == a.member_id and a.epoch >= 1 and resp.heartbeat_interval_ms > 0

    await a.join_owning({0, 1, 2})
    assert list(a.assigned) == [topic_id]  # by the id Metadata v12 gives the topic
    fenced = await a.beat(epoch=a.epoch + 5)
    assert fenced.error_code == codes.FENCED_MEMBER_EPOCH, codes.name(fenced.error_code)
    left = await a.beat(epoch=-1)
    assert left.error_code == 0 and left.member_epoch == -1, left
    gone = await a.beat(epoch=a.epoch)
    assert gone.error_code == codes.UNKNOWN_MEMBER_ID, codes.name(gone.error_code)
    nowhere = await Member(client, node, eosflow_broker.unique("no-group"), topic).beat(epoch=3)
    assert nowhere.error_code == codes.GROUP_ID_NOT_FOUND, codes.name(nowhere.error_code)


async def test_a_partition_moves_only_after_its_owner_acknowledges_the_revocation(
    eosflow_broker: Broker, client: Any
) -> None:
    topic, group, node = await _members(client, eosflow_broker, 4)
    a = Member(client, node, group, topic)
    await a.join_owning({0, 1, 2, 3})
    everything, a_epoch = dict(a.assigned), a.epoch

    b = Member(client, node, group, topic)
    joined = await b.beat()
    assert joined.error_code == 0, joined.error_message
    # the owner is asked to give up half: its assignment shrinks, its epoch stays
    # while it still reports owning them
    await _until("the owner is asked to revoke", lambda: _shrunk(a, everything))
    assert a.epoch == a_epoch and len(a.partitions()) == 2
    kept = a.partitions()
    for _ in range(3):  # still owned (and null: "unchanged") is no acknowledgement
        r = await b.beat()
        assert r.error_code == 0 and not b.partitions() & (set(range(4)) - kept)
        assert (await a.beat(owned=everything)).error_code == 0
        assert (await a.beat(owned=None)).error_code == 0
    assert a.epoch == a_epoch and not b.partitions()
    # the acknowledgement: a heartbeat owning only what it keeps; its epoch moves on
    r = await a.beat()
    assert r.error_code == 0 and a.epoch > a_epoch and a.partitions() == kept

    async def b_gets_them() -> bool:
        await b.beat()
        return b.partitions() == set(range(4)) - kept

    await _until("the new member gets the released partitions", b_gets_them)
    assert b.epoch == a.epoch


async def _shrunk(a: Member, everything: Owned) -> bool:
    r = await a.beat(owned=everything)
    assert r.error_code == 0, r.error_message
    return len(a.partitions()) < 4


async def test_a_stale_epoch_is_fenced_the_previous_one_tolerated(
    eosflow_broker: Broker, client: Any
) -> None:
    topic, group, node = await _members(client, eosflow_broker, 2)
    a = Member(client, node, group, topic)
    await a.join_owning({0, 1})
    before, both = a.epoch, dict(a.assigned)
    b = Member(client, node, group, topic)
    await b.beat()
    await _until("the owner is asked to revoke", lambda: _shrunk_to_one(a, both))
    await a.beat()  # acknowledged: the epoch moves on
    assert a.epoch > before
    # its previous epoch, owning no more than it is assigned: the answer that moved it
    # may have been lost, so it is tolerated
    ok = await a.beat(epoch=before)
    assert ok.error_code == 0 and ok.member_epoch == a.epoch, codes.name(ok.error_code)
    # the previous epoch while claiming a partition it gave up: fenced
    stale = await a.beat(owned=both, epoch=before)
    assert stale.error_code == codes.FENCED_MEMBER_EPOCH, codes.name(stale.error_code)
    # an epoch it never had: fenced
    ahead = await a.beat(epoch=a.epoch + 1)
    assert ahead.error_code == codes.FENCED_MEMBER_EPOCH, codes.name(ahead.error_code)
    # fencing left the member as it was
    assert (await a.beat()).error_code == 0
    # a fenced member rejoins with epoch 0 and its id: it keeps its place and assignment
    mine, epoch = dict(a.assigned), a.epoch
    a.assigned = {}
    back = await a.beat(owned={}, epoch=0)
    assert back.error_code == 0 and back.member_epoch == epoch, codes.name(back.error_code)
    (pairs, _tags) = back.assignment
    assert {uuid.UUID(str(t)): sorted(ps) for t, ps, _ in pairs} == mine


async def _shrunk_to_one(a: Member, both: Owned) -> bool:
    r = await a.beat(owned=both)
    assert r.error_code == 0, r.error_message
    return len(a.partitions()) == 1


async def test_a_static_member_leaves_for_now_and_its_instance_takes_its_place(
    eosflow_broker: Broker, client: Any
) -> None:
    """Static membership under the consumer protocol (KIP-848's epoch -2): what eosflow's
    ``leave()`` with ``group_instance_id`` set, and its restart, rest on."""
    topic, group, node = await _members(client, eosflow_broker, 2)
    instance = eosflow_broker.unique("instance")
    a = Member(client, node, group, topic, instance_id=instance)
    await a.join_owning({0, 1})
    mine, a_epoch = dict(a.assigned), a.epoch
    # the instance id is taken while its member is live
    twin = await Member(client, node, group, topic, instance_id=instance).beat()
    assert twin.error_code == codes.UNRELEASED_INSTANCE_ID, codes.name(twin.error_code)
    # leaving for now: the member keeps its partitions for its session
    left = await a.beat(epoch=-2)
    assert left.error_code == 0 and left.member_epoch == -2, codes.name(left.error_code)
    b = Member(client, node, group, topic)
    for _ in range(5):  # a dynamic member joining gets none of them meanwhile
        r = await b.beat()
        assert r.error_code == 0 and not b.partitions(), (codes.name(r.error_code), b.assigned)
        await asyncio.sleep(0.1)
    # the instance back under a new member id takes the place, assignment and epoch
    back = Member(client, node, group, topic, instance_id=instance)
    r = await back.beat(owned={})
    assert r.error_code == 0, codes.name(r.error_code)
    assert back.partitions() and back.partitions() <= {p for ps in mine.values() for p in ps}
    assert back.epoch >= a_epoch, (back.epoch, a_epoch)
    # and the old member id is fenced out
    old = await a.beat(epoch=a_epoch)
    assert old.error_code in (codes.FENCED_INSTANCE_ID, codes.UNKNOWN_MEMBER_ID), codes.name(
        old.error_code
    )
    print(f"old member id after its instance came back: {codes.name(old.error_code)}")


async def test_a_transactional_offset_commit_is_checked_by_member_epoch(
    eosflow_broker: Broker, client: Any
) -> None:
    """TxnOffsetCommit v3 from a consumer-protocol member: its current epoch as the
    generation commits; a past epoch is ILLEGAL_GENERATION (genuine 4.4.0 answers v3 so),
    an unknown member id UNKNOWN_MEMBER_ID; without a member (v3's -1, "", null) nothing
    is checked."""
    b = eosflow_broker
    topic, group, node = await _members(client, b, 1)
    a = Member(client, node, group, topic)
    await a.join_owning({0})
    c = RawConn(b.bootstrap_servers)
    try:
        txn = b.unique("cgh-tx")
        find = {"coordinator_key": txn, "coordinator_type": 1}
        assert (await retried(c, FIND_COORDINATOR, 1, find))[-1] == 0
        init = {"transactional_id": txn, "transaction_timeout_ms": 60000}
        assert (await retried(c, INIT_PRODUCER_ID, 1, init))[-1] == 0
        r = await c.send(INIT_PRODUCER_ID, 1, init)
        assert r is not None and r["error_code"] == 0
        ids = {
            "transactional_id": txn,
            "producer_id": r["producer_id"],
            "producer_epoch": r["producer_epoch"],
        }
        r = await c.send(ADD_OFFSETS, 1, {**ids, "group_id": group})
        assert r is not None and r["error_code"] == 0

        async def commit(generation: int, member_id: str) -> int:
            body = {
                **ids,
                "group_id": group,
                "generation_id": generation,
                "member_id": member_id,
                "group_instance_id": None,
                "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1}]}
                ],
            }
            resp = await c.send(TXN_OFFSET_COMMIT, 3, body)
            assert resp is not None
            return int(resp["topics"][0]["partitions"][0]["error_code"])

        answered = [
            await commit(a.epoch, a.member_id),
            await commit(a.epoch - 1, a.member_id),
            await commit(a.epoch, str(uuid.uuid4())),
            await commit(-1, ""),
        ]
        # a past epoch: ILLEGAL_GENERATION at v3 (STALE_MEMBER_EPOCH is for newer versions)
        assert answered == [0, codes.ILLEGAL_GENERATION, codes.UNKNOWN_MEMBER_ID, 0], [
            codes.name(x) for x in answered
        ]
        r = await c.send(END_TXN, 1, {**ids, "transaction_result": False})
        assert r is not None and r["error_code"] == 0
    finally:
        c.close()


async def test_an_offset_fetch_is_checked_by_member_and_epoch(
    eosflow_broker: Broker, client: Any
) -> None:
    """OffsetFetch v9 (what eosflow sends for newly assigned partitions under the
    consumer protocol) names the member asking: its id and current epoch are answered;
    a past epoch is STALE_MEMBER_EPOCH, an unknown member id UNKNOWN_MEMBER_ID, each as
    the group's error; without a member (null id, epoch -1) nothing is checked."""
    b = eosflow_broker
    topic, group, node = await _members(client, b, 1)
    a = Member(client, node, group, topic)
    await a.join_owning({0})
    c = RawConn(b.bootstrap_servers)
    try:

        async def fetch(member_id: str | None, epoch: int) -> int:
            body = {
                "groups": [
                    {
                        "group_id": group,
                        "member_id": member_id,
                        "member_epoch": epoch,
                        "topics": [{"name": topic, "partition_indexes": [0]}],
                    }
                ],
                "require_stable": True,
            }
            resp = await c.send(OFFSET_FETCH, 9, body)
            assert resp is not None
            (g,) = resp["groups"]
            assert g["group_id"] == group
            if g["error_code"] == 0:
                ((t,),) = [g["topics"]]
                assert [p["committed_offset"] for p in t["partitions"]] == [-1]
            return int(g["error_code"])

        answered = [
            await fetch(a.member_id, a.epoch),
            await fetch(a.member_id, a.epoch - 1),
            await fetch(a.member_id, a.epoch + 1),
            await fetch(str(uuid.uuid4()), a.epoch),
            await fetch(None, -1),
        ]
        want = [0, codes.STALE_MEMBER_EPOCH, codes.STALE_MEMBER_EPOCH, codes.UNKNOWN_MEMBER_ID, 0]
        assert answered == want, [codes.name(x) for x in answered]
    finally:
        c.close()
