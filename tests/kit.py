"""Helpers shared by the tests: topic set-up, complete reads and polling, on any broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from eosflow.testing import read_topic


async def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def read_all(
    bootstrap: str, topic: str, *, committed_only: bool = True
) -> list[tuple[int, int, bytes | None]]:
    """Every record of ``topic`` up to its current end, as (partition, offset, value)."""
    records = await read_topic(bootstrap, topic, committed_only=committed_only)
    return [(p, o, v) for p, o, _k, v in records]


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
