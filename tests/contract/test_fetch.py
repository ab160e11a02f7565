"""Broker contract: Fetch limits -- per-partition max bytes (with KIP-74's first-batch
rule), long polling up to max wait, and unknown topics -- and time-based retention: a log
whose records are all older than retention.ms is deleted, and a fetch below its new start
is out of range."""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords
from kit import create_topic, eventually

from eosflow.testing._ladder import Broker


async def _fetch(
    p: AIOKafkaProducer, topic: str, offset: int, max_bytes: int, max_wait_ms: int = 0
) -> tuple[int, int, list[int]]:
    """(error code, high watermark, offsets of the records returned)."""
    leader = p.client.cluster.leader_for_partition(TopicPartition(topic, 0))
    req = FetchRequest(max_wait_ms, 1, 50 * 1024 * 1024, 1, [(topic, [(0, offset, max_bytes)])])
    resp = await p.client.send(leader, req)
    part = resp.topics[0][1][0]
    error, hw, data = part[1], part[2], part[-1]
    offsets: list[int] = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        offsets.extend(r.offset for r in batch)
    return error, hw, offsets


async def test_fetch_max_bytes_and_the_first_batch_rule(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic = b.unique("fb")
    await create_topic(b.bootstrap_servers, topic)
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await p.start()
    try:
        for i in range(10):  # one batch each: ~1 KB
            await p.send_and_wait(topic, bytes([i]) * 1000, partition=0)
        error, hw, offsets = await _fetch(p, topic, 0, max_bytes=1)
        assert (error, hw) == (0, 10)
        assert offsets == [0], "a batch larger than max bytes still comes back, alone"
        _, _, offsets = await _fetch(p, topic, 0, max_bytes=3500)
        assert offsets == [0, 1, 2], "only whole batches that fit"
        _, _, offsets = await _fetch(p, topic, 4, max_bytes=1 << 20)
        assert offsets == list(range(4, 10))
    finally:
        await p.stop()


async def test_fetch_at_the_end_waits_up_to_max_wait(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic = b.unique("fw")
    await create_topic(b.bootstrap_servers, topic)
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await p.start()
    try:
        await p.send_and_wait(topic, b"only", partition=0)
        started = time.monotonic()
        error, _, offsets = await _fetch(p, topic, 1, max_bytes=1 << 20, max_wait_ms=500)
        waited = time.monotonic() - started
        assert error == 0 and offsets == []
        assert 0.4 <= waited < 5, f"answered after {waited:.2f} s"
    finally:
        await p.stop()


async def test_records_older_than_retention_are_deleted_and_then_out_of_range(
    eosflow_broker: Broker,
) -> None:
    """Stamped at 1970's first seconds, a topic's records are older than its 7-day
    retention: the broker's next retention check deletes them (the log is one segment);
    records of today stay. A fetch at offset 0 is then out of range. Both brokers check
    every second here (the genuine one's first check comes 30 s after its start)."""
    b = eosflow_broker
    old, new = b.unique("ret-old"), b.unique("ret-new")
    for topic in (old, new):
        await create_topic(b.bootstrap_servers, topic)
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await p.start()
    c = AIOKafkaConsumer(bootstrap_servers=b.bootstrap_servers, auto_offset_reset="none")
    await c.start()
    try:
        for i in range(5):
            await p.send_and_wait(old, b"old", partition=0, timestamp_ms=1000 + i)
            await p.send_and_wait(new, b"new", partition=0)
        tps = [TopicPartition(old, 0), TopicPartition(new, 0)]

        async def deleted() -> bool:
            return (await c.beginning_offsets(tps))[tps[0]] == 5

        await eventually(deleted, timeout_s=45, what="the old records deleted")
        assert (await c.beginning_offsets(tps))[tps[1]] == 0, "today's records stay"
        assert (await c.end_offsets(tps)) == {tps[0]: 5, tps[1]: 5}
        c.assign([tps[0]])
        c.seek(tps[0], 0)
        try:
            await c.getmany(timeout_ms=5000)
        except OffsetOutOfRangeError as e:
            assert e.args[0] == {tps[0]: 0}, e.args
        else:
            raise AssertionError("a fetch below the log start was answered")
    finally:
        await c.stop()
        await p.stop()
