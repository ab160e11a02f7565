"""The test cluster's own wire behaviour: version profiles, bad frames, unknown APIs."""

from __future__ import annotations

import asyncio
import struct

import pytest
from aiokafka import AIOKafkaProducer

from eosflow import _aiokafka as ak
from eosflow._protocol import _codes as codes
from eosflow.testing import ClusterSettings, FakeCluster
from eosflow.testing._broker import PROFILE_FEATURES


async def _raw(cluster: FakeCluster, frame: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(cluster.host, cluster.port)
    try:
        writer.write(frame)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


def _request(api_key: int, version: int, body: bytes = b"") -> bytes:
    client = b"t"
    head = struct.pack(">hhih", api_key, version, 7, len(client)) + client
    return struct.pack(">i", len(head) + len(body)) + head + body


async def test_bytes_after_a_request_body_are_ignored_as_kafka_ignores_them() -> None:
    """librdkafka 2.12.1's Metadata v12 for every topic, byte for byte as it sent it (its
    AdminClient.list_topics, and so quixstreams' start): three bytes past the body, which
    genuine Kafka answers. The cluster closed the connection on it."""
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    async with FakeCluster() as c:
        c.create_topic("t", 1)
        answer = await _raw(c, struct.pack(">i", len(frame)) + frame)
    assert len(answer) > 8
    size, correlation_id = struct.unpack_from(">ii", answer)
    assert (size, correlation_id) == (len(answer) - 4, 3)
    assert b"\x02t" in answer  # the topic, as a compact string: every topic was asked for


@pytest.mark.parametrize(
    ("profile", "features", "kip447", "kip360", "kip848", "txn_v2"),
    [
        ("2.4", None, False, False, False, False),
        ("2.5", None, True, True, False, False),
        ("4.0", None, True, True, True, True),
        # as 4.x brokers formatted without the consumer protocol, or without transactions v2
        ("4.0", {"group.version": 0, "transaction.version": 2}, True, True, False, True),
        ("4.0", {"group.version": 1, "transaction.version": 1}, True, True, True, False),
    ],
)
async def test_profiles_shape_what_the_client_detects(
    profile: str,
    features: dict[str, int] | None,
    kip447: bool,
    kip360: bool,
    kip848: bool,
    txn_v2: bool,
) -> None:
    async with FakeCluster(ClusterSettings(profile=profile, features=features)) as c:
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
        await p.start()
        try:
            caps = await ak.capabilities(p)
        finally:
            await p.stop()
    assert (caps.kip447, caps.kip360, caps.kip848, caps.txn_v2) == (
        kip447,
        kip360,
        kip848,
        txn_v2,
    )
    # ApiVersions v3 was answered (header v0, then the body and its tags, which carry the
    # finalized features)
    given = PROFILE_FEATURES.get(profile, {}) if features is None else features
    assert dict(caps.features) == {k: v for k, v in given.items() if v > 0}
    # the consumer group protocol's API is Kafka 4's: the older profiles lack it
    assert (caps.consumer_group_heartbeat >= 0) == (profile == "4.0")


async def test_kip896_floors_in_the_40_profile() -> None:
    async with FakeCluster(ClusterSettings(profile="4.0")) as c:
        floors = {k: lo for k, lo, _ in c.api_versions()}
        accepts_produce_v2 = c._accepts(0, 2)
    assert floors[1] == 4 and floors[2] == 1 and floors[8] == 2 and floors[19] == 2
    # Produce: advertised from v0 as Kafka 4.x does, v0-v2 refused (closed) all the same
    assert floors[0] == 0 and not accepts_produce_v2


async def test_malformed_frame_closes_only_its_connection() -> None:
    async with FakeCluster() as c:
        assert await _raw(c, struct.pack(">i", 3) + b"\x00\x01\x02") == b""
        assert await _raw(c, _request(0, 8, b"\xff\xff")) == b"", "truncated body"
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
        await p.start()  # the broker still serves other connections
        await p.send_and_wait("t", b"ok")
        await p.stop()


async def test_unknown_api_closes_and_unknown_apiversions_version_is_answered() -> None:
    async with FakeCluster() as c:
        assert await _raw(c, _request(57, 0)) == b"", "unknown API: connection closed"
        answer = await _raw(c, _request(18, 9))
    size, corr, error = struct.unpack_from(">iih", answer)
    assert size == len(answer) - 4 and corr == 7
    assert error == codes.UNSUPPORTED_VERSION, "with the supported ranges"


async def test_unknown_topics_are_errors_when_auto_creation_is_off() -> None:
    from aiokafka.errors import KafkaTimeoutError, UnknownTopicOrPartitionError

    async with FakeCluster(ClusterSettings(auto_create_topics=False)) as c:
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=2000)
        await p.start()
        try:
            with pytest.raises((KafkaTimeoutError, UnknownTopicOrPartitionError)):
                await p.send_and_wait("missing", b"x")
        finally:
            await p.stop()
        assert "missing" not in c.topics


async def test_list_offsets_v5_as_kafkas_spec_lays_it_out() -> None:
    # ListOffsets v5, built from Kafka's message spec by hand: current_leader_epoch is an
    # int32 (aiokafka's own v5 class says int64; only clients other than aiokafka send v5)
    topic = b"lo"
    body = struct.pack(">ib", -1, 1)  # replica id, isolation level (read_committed)
    body += struct.pack(">ih", 1, len(topic)) + topic  # one topic
    body += struct.pack(">i", 1) + struct.pack(">iiq", 0, -1, -1)  # partition 0, latest
    async with FakeCluster() as c:
        c.create_topic("lo", 1)
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
        await p.start()
        for _ in range(3):
            await p.send_and_wait("lo", b"x", partition=0)
        await p.stop()
        answer = await _raw(c, _request(2, 5, body))
    # size, correlation, throttle, [topic: name, [partition, error, timestamp, offset, epoch]]
    _, corr, _, ntopics, nlen = struct.unpack_from(">iiiih", answer)
    at = 18 + nlen
    nparts, part, error, _ts, offset, _epoch = struct.unpack_from(">iihqqi", answer, at)
    assert (corr, ntopics, nparts, part, error, offset) == (7, 1, 1, 0, 0, 3)


async def test_offset_fetch_null_topics_is_answered_from_v2_and_malformed_before() -> None:
    # OffsetFetchRequest.json: topics nullable from v2 ("all committed partitions"); a
    # null in v1 is a non-nullable field serialized as null, which Kafka cannot parse
    group = b"g"
    body = struct.pack(">h", len(group)) + group + struct.pack(">i", -1)
    async with FakeCluster() as c:
        c.create_topic("t", 2)
        c.groups.commit("g", -1, "", None, {("t", 1): (4, "")})
        assert await _raw(c, _request(9, 1, body)) == b"", "v1: connection closed"
        answer = await _raw(c, _request(9, 2, body))
    # size, correlation, [topic: name, [partition, offset, metadata, error]], error
    _, corr, ntopics, nlen = struct.unpack_from(">iiih", answer)
    at = 14 + nlen
    nparts, part, offset, mlen = struct.unpack_from(">iiqh", answer, at)
    error, top_error = struct.unpack_from(">hh", answer, at + 18 + mlen)
    assert answer[14:at] == b"t"
    assert (corr, ntopics, nparts, part, offset) == (7, 1, 1, 1, 4)
    assert error == top_error == codes.NONE
