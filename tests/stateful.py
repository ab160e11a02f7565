"""Helpers of the stateful tests: the counting app's config, keyed input, waiting for the
group's progress, and the count check (``eosflow.testing.check_counts``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from fleet import committed_total

import eosflow
from eosflow.testing import StateReport, check_counts


def changelog(group: str, src: str, store: str = "counts") -> str:
    return f"{group}--{src}--{store}--changelog"


def state_config(
    bootstrap: str,
    group: str,
    src: str,
    transactional_id: str,
    state_dir: Path | str,
    session_s: float = 6.0,
    **kw: object,
) -> eosflow.EosConfig:
    base: dict[str, object] = dict(
        bootstrap_servers=bootstrap,
        group_id=group,
        input_topics=(src,),
        transactional_id=transactional_id,
        session_timeout_s=session_s,
        heartbeat_interval_s=session_s / 10,
        transaction_timeout_s=session_s * 0.8,
        state_dir=str(state_dir),
    )
    base.update(kw)
    return eosflow.EosConfig(**base)  # type: ignore[arg-type]


async def seed_keys(
    bootstrap: str,
    topic: str,
    n: int,
    keys: int,
    start: int = 0,
    key_bytes: int = 0,
    timestamp_ms: Callable[[int], int] | None = None,
) -> None:
    """Records ``start``..``start+n`` with keys cycling through ``keys`` distinct ones
    (``k<i % keys>``, padded to ``key_bytes``), placed by the key's hash as Kafka does,
    so every record of a key is in one partition; record i's timestamp is
    ``timestamp_ms(i)`` when given (else the producer's clock)."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await p.start()
    try:
        futs = []
        for i in range(start, start + n):
            key = f"k{i % keys}".encode().ljust(key_bytes, b".")
            ts = None if timestamp_ms is None else timestamp_ms(i)
            futs.append(await p.send(topic, b"x", key=key, timestamp_ms=ts))
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def until_committed(
    bootstrap: str,
    topic: str,
    partitions: int,
    group: str,
    target: int,
    apps: tuple[eosflow.EosApp, ...] = (),
    timeout_s: float = 60.0,
) -> None:
    """Wait until ``group`` committed ``target`` input records in all, failing early when
    one of ``apps`` ended on an error."""
    deadline = time.monotonic() + timeout_s
    while (done := await committed_total(bootstrap, topic, partitions, group)) < target:
        for app in apps:
            assert app.failure is None, app.failure
        assert time.monotonic() < deadline, f"stalled at {done}/{target}"
        await asyncio.sleep(0.1)


async def until_each_partition_committed(
    bootstrap: str, topic: str, partitions: int, group: str, apps: tuple[eosflow.EosApp, ...]
) -> None:
    """Wait until ``group`` committed something on every partition of ``topic`` (so each
    partition's stores hold state that a new owner must restore)."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        deadline = time.monotonic() + 60
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        while not all([(await c.committed(tp) or 0) > 0 for tp in tps]):
            for app in apps:
                assert app.failure is None, app.failure
            assert time.monotonic() < deadline, "a partition saw no commit within 60 s"
            await asyncio.sleep(0.1)
    finally:
        await c.stop()


async def counts_ok(bootstrap: str, src: str, group: str, output: str | None = None) -> StateReport:
    """The count check of ``examples/counting.py``'s run (output ``<src>-counts``
    unless named), asserted."""
    report = await check_counts(
        bootstrap, src, output or f"{src}-counts", changelog(group, src), group_id=group
    )
    assert report.ok, report.summary()
    return report
