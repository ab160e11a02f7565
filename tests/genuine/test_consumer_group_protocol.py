"""The consumer group protocol (KIP-848) as genuine Kafka speaks it: eosflow's
declaration of ConsumerGroupHeartbeat (``_specs.CONSUMER_GROUP_HEARTBEAT``) against a 4.x
broker. eosflow's session does not use the protocol yet (issue 23); these pin what it
will be built on: a member joins with epoch 0, is given every partition of its
subscription by topic id, is fenced for an epoch it does not have, and leaves with -1."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import GroupCoordinatorNotAvailableError
from conftest import genuine, version
from test_launcher import _create

from eosflow import _codes as codes
from eosflow import _specs, _wire

pytestmark = pytest.mark.genuine


async def _heartbeat(client: Any, node: int, **body: Any) -> Any:
    req = _wire.SpecRequest.of(_specs.CONSUMER_GROUP_HEARTBEAT, body)
    return await client.send(node, req)


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


async def test_a_member_joins_gets_every_partition_by_topic_id_and_leaves() -> None:
    if int(version().split(".")[0]) < 4:
        pytest.skip(f"KIP-848 is Kafka 4's; this run's broker is {version()}")
    async with genuine(version()) as k:
        await _create(k.bootstrap_servers, "cgh", 3, 1)
        p = AIOKafkaProducer(bootstrap_servers=k.bootstrap_servers)
        await p.start()
        try:
            client = p.client
            node = await _coordinator(client, "cgh-group")
            member = str(uuid.uuid4())  # v1: the member makes its own id (KIP-1082)
            subscription = {
                "group_id": "cgh-group",
                "member_id": member,
                "rebalance_timeout_ms": 30_000,
                "subscribed_topic_names": ["cgh"],
                "server_assignor": "uniform",
            }
            resp = await _heartbeat(client, node, member_epoch=0, **subscription)
            assert resp.error_code == 0, resp.error_message
            assert resp.member_id == member and resp.member_epoch >= 1
            assert resp.heartbeat_interval_ms > 0
            epoch, assignment = resp.member_epoch, resp.assignment
            deadline = time.monotonic() + 30
            while assignment is None:  # the target may come with a later heartbeat
                assert time.monotonic() < deadline, "no assignment within 30 s"
                resp = await _heartbeat(client, node, member_epoch=epoch, **subscription)
                assert resp.error_code == 0, resp.error_message
                epoch, assignment = resp.member_epoch, resp.assignment
            topic_partitions, _tags = assignment
            ((topic_id, partitions, _),) = topic_partitions
            assert topic_id != uuid.UUID(int=0) and sorted(partitions) == [0, 1, 2]

            owned = [{"topic_id": topic_id, "partitions": sorted(partitions)}]
            ack = await _heartbeat(
                client, node, member_epoch=epoch, topic_partitions=owned, **subscription
            )
            assert ack.error_code == 0 and ack.member_epoch == epoch, ack
            fenced = await _heartbeat(client, node, member_epoch=epoch + 5, **subscription)
            assert fenced.error_code == codes.FENCED_MEMBER_EPOCH, codes.name(fenced.error_code)
            left = await _heartbeat(client, node, member_epoch=-1, **subscription)
            assert left.error_code == 0 and left.member_epoch == -1, left
        finally:
            await p.stop()
