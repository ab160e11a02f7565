"""Helpers shared by the tests: topic set-up and complete reads, on any broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


async def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def partitions_of(bootstrap: str, topic: str) -> list[int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        return sorted(await producer.partitions_for(topic))
    finally:
        await producer.stop()


async def read_all(
    bootstrap: str, topic: str, *, committed_only: bool = True, timeout_s: float = 20.0
) -> list[tuple[int, int, bytes | None]]:
    """Every record of ``topic`` up to its current end, as (partition, offset, value)."""
    isolation = "read_committed" if committed_only else "read_uncommitted"
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in await partitions_of(bootstrap, topic)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[int, int, bytes | None]] = []
        deadline = time.monotonic() + timeout_s
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} did not reach {ends}")
            batch = await consumer.getmany(timeout_ms=200)
            for tp, recs in batch.items():
                out.extend((tp.partition, r.offset, r.value) for r in recs)
        return out
    finally:
        await consumer.stop()


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout_s: float = 20.0, what: str = "condition"
) -> None:
    """Poll ``check`` until it holds (for broker-side timers whose period differs
    between brokers), failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout_s} s")
        await asyncio.sleep(0.05)
