"""Broker contract: OffsetFetch with null topics, "every partition the group has a
committed offset for" (Kafka's OffsetFetchRequest.json: topics nullable from v2).

The plain case goes through aiokafka's admin client (``list_consumer_group_offsets``),
as a user would; the RequireStable case sends OffsetFetch v7 with null topics by hand, as
no aiokafka call does. Kafka lists the partitions with a committed offset only: one
that a still-open transaction has staged an offset for answers UNSTABLE_OFFSET_COMMIT
under RequireStable (its committed offset otherwise), and one with nothing but a staged
offset is not listed at all.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import ConnectionGroup
from aiokafka.protocol.api import Request
from aiokafka.structs import OffsetAndMetadata
from kit import RawConn, create_topic, eventually

from eosflow import _aiokafka as ak
from eosflow._protocol import _codes as codes
from eosflow._protocol import _specs, _wire
from eosflow.testing._ladder import Broker


async def test_list_consumer_group_offsets_returns_every_committed_offset(
    eosflow_broker: Broker,
) -> None:
    b = eosflow_broker
    first, second, group = b.unique("of"), b.unique("of2"), b.unique("ofg")
    await create_topic(b.bootstrap_servers, first, 3)
    await create_topic(b.bootstrap_servers, second, 1)
    committed = {
        TopicPartition(first, 0): 3,
        TopicPartition(first, 2): 7,  # partition 1 gets nothing: it must not be listed
        TopicPartition(second, 0): 11,
    }
    consumer = AIOKafkaConsumer(
        bootstrap_servers=b.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
    await admin.start()
    try:
        consumer.assign(list(committed))
        await consumer.commit({tp: OffsetAndMetadata(off, "m") for tp, off in committed.items()})
        listed = await admin.list_consumer_group_offsets(group)
        assert {tp: (om.offset, om.metadata) for tp, om in listed.items()} == {
            tp: (off, "m") for tp, off in committed.items()
        }
        assert await admin.list_consumer_group_offsets(b.unique("nobody")) == {}
    finally:
        await admin.close()
        await consumer.stop()


class _AllOffsetsV7(Request[Any]):
    """OffsetFetch v7 with null topics; ``require_stable`` as given."""

    API_KEY = 9

    def __init__(self, group: str, require_stable: bool) -> None:
        self.group = group
        self.require_stable = require_stable

    def build(self, request_struct_class: Any) -> Any:
        return request_struct_class(self.group, None, self.require_stable, {})


_AllOffsetsV7._CLASSES = (_wire.spec_classes(_specs.OFFSET_FETCH, 7)[0],)  # type: ignore[assignment]


async def _all_offsets(
    p: AIOKafkaProducer, group: str, require_stable: bool
) -> dict[TopicPartition, int]:
    """Every partition listed, mapped to its offset, or to -codes.UNSTABLE_OFFSET_COMMIT."""
    client = p.client
    node = await client.coordinator_lookup(0, group)
    resp = await client.send(
        node, _AllOffsetsV7(group, require_stable), group=ConnectionGroup.COORDINATION
    )
    body = resp.to_object()
    assert body["error_code"] == codes.NONE, body
    out: dict[TopicPartition, int] = {}
    for t in body["topics"]:
        for part in t["partitions"]:
            code = part["error_code"]
            assert code in (codes.NONE, codes.UNSTABLE_OFFSET_COMMIT), part
            tp = TopicPartition(t["name"], part["partition_index"])
            out[tp] = -code if code else part["committed_offset"]
    return out


async def test_all_offsets_under_require_stable_flag_pending_transactional_offsets(
    eosflow_broker: Broker,
) -> None:
    b = eosflow_broker
    topic, group = b.unique("ofs"), b.unique("ofsg")
    await create_topic(b.bootstrap_servers, topic, 3)
    tp0, tp1, tp2 = (TopicPartition(topic, i) for i in range(3))
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, transactional_id=b.unique("tx"))
    await p.start()
    try:
        caps = await ak.capabilities(p)
        if not caps.kip447:
            pytest.skip(f"broker lacks OffsetFetch v7 ({caps})")
        async with p.transaction():
            await p.send_offsets_to_transaction({tp0: 3, tp1: 7}, group)

        async def committed() -> bool:
            return await _all_offsets(p, group, True) == {tp0: 3, tp1: 7}

        await eventually(committed, what="the committed transaction's offsets")
        await p.begin_transaction()
        await p.send_offsets_to_transaction({tp0: 5, tp2: 1}, group)
        assert await _all_offsets(p, group, True) == {tp0: -codes.UNSTABLE_OFFSET_COMMIT, tp1: 7}
        assert await _all_offsets(p, group, False) == {tp0: 3, tp1: 7}
        await p.commit_transaction()

        async def applied() -> bool:
            return await _all_offsets(p, group, True) == {tp0: 5, tp1: 7, tp2: 1}

        await eventually(applied, what="the second transaction's offsets")
    finally:
        await p.stop()


async def test_offset_fetch_v8_with_a_groups_null_topics_lists_its_committed_offsets(
    eosflow_broker: Broker,
) -> None:
    """OffsetFetch v8+ asks per group; a group's null topics asks for every partition it
    has a committed offset for, as the Java admin's ``listConsumerGroupOffsets`` sends it
    (the test cluster refused it as malformed until 2026-11-27: Kafka Streams' benchmark
    contenders timed out reading their offsets)."""
    b = eosflow_broker
    c = RawConn(b.bootstrap_servers)
    try:
        versions = await c.send(18, 0, {})
        assert versions is not None
        (fetch,) = [v for v in versions["api_versions"] if v["api_key"] == 9]
        if fetch["max_version"] < 8:
            pytest.skip(f"broker lacks OffsetFetch v8 (max v{fetch['max_version']})")
        topic, group, other = b.unique("of8"), b.unique("of8g"), b.unique("of8none")
        await create_topic(b.bootstrap_servers, topic, 2)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=b.bootstrap_servers, group_id=group, enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 1)])
            await consumer.commit({TopicPartition(topic, 1): OffsetAndMetadata(9, "")})
        finally:
            await consumer.stop()
        body = {
            "groups": [{"group_id": group, "topics": None}, {"group_id": other, "topics": None}],
            "require_stable": False,
        }
        r = await c.send(9, 8, body)
        assert r is not None, "the broker closed the connection: the request was refused"
        answers = {g["group_id"]: g for g in r["groups"]}
        assert answers[group]["error_code"] == 0
        listed = [
            (t["name"], p["partition_index"], p["committed_offset"])
            for t in answers[group]["topics"]
            for p in t["partitions"]
        ]
        assert listed == [(topic, 1, 9)]
        assert answers[other]["error_code"] == 0 and answers[other]["topics"] == []
    finally:
        c.close()


async def test_offset_metadata_over_4096_characters_is_refused(eosflow_broker: Broker) -> None:
    """Kafka refuses an offset whose metadata is longer than offset.metadata.max.bytes
    (4096 by default) with OFFSET_METADATA_TOO_LARGE and commits nothing for it; 4096
    characters pass (eosflow's commits carry changelog offsets there)."""
    b = eosflow_broker
    topic, group = b.unique("ofm"), b.unique("ofmg")
    await create_topic(b.bootstrap_servers, topic, 1)
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=b.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.commit({tp: OffsetAndMetadata(3, "m" * 4096)})
        with pytest.raises(Exception) as refused:
            await consumer.commit({tp: OffsetAndMetadata(5, "m" * 4097)})
        assert type(refused.value).__name__ == "OffsetMetadataTooLargeError", refused.value
        assert await consumer.committed(tp) == 3
    finally:
        await consumer.stop()
