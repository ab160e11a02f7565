"""The runtime end to end on a broker from the ladder: a pass-through app."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer
from kit import Upper, create_topic, eventually, ladder_config, read_all

import eosflow
from eosflow._checks._checker import read_records
from eosflow.testing._ladder import Broker

config = ladder_config


async def seed(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        futs = [
            await p.send(topic, f"v{i}".encode(), key=str(i).encode(), partition=i % partitions)
            for i in range(n)
        ]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def test_pass_through_is_exactly_once(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    src, dst, group = b.unique("in"), b.unique("out"), b.unique("g")
    await create_topic(b.bootstrap_servers, src, 3)
    await create_topic(b.bootstrap_servers, dst, 2)
    await seed(b.bootstrap_servers, src, 3000, 3)
    app = eosflow.EosApp(Upper(dst), config(b, src, group))
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return app.stats.records >= 3000 and app.last_outcome is eosflow.Outcome.COMMITTED

        await eventually(done, timeout_s=60, what="all input processed and committed")
    out = sorted(v for _, _, v in await read_all(b.bootstrap_servers, dst) if v is not None)
    assert out == sorted(f"V{i}".encode() for i in range(3000))
    assert app.stats.committed >= 1 and app.stats.aborted == 0


async def test_outputs_keep_key_headers_partition_and_order(eosflow_broker: Broker) -> None:
    """Outputs are produced as whole batches: each keeps its key, headers and a fresh
    timestamp; an explicit partition is kept; a keyed output lands where
    ``producer.send`` puts the same key; order per partition is processing order, also
    when a small ``max_batch_bytes`` splits one transaction into many batches."""
    b = eosflow_broker
    n = 600
    src, keyed, fixed, ref = (b.unique(t) for t in ("in", "keyed", "fixed", "ref"))
    for topic, parts in ((src, 1), (keyed, 3), (fixed, 2), (ref, 3)):
        await create_topic(b.bootstrap_servers, topic, parts)
    await seed(b.bootstrap_servers, src, n, 1)

    class Fan(eosflow.Processor):
        async def process(self, record: eosflow.Record) -> list[eosflow.Output]:
            i = int(record.key or b"")
            hdrs = (("i", str(i).encode()), ("i", b"again"))
            return [
                eosflow.Output(keyed, record.value, key=record.key, headers=hdrs),
                eosflow.Output(fixed, record.value, key=record.key, partition=i % 2),
            ]

    started_ms = int(time.time() * 1000) - 1000
    app = eosflow.EosApp(Fan(), config(b, src, b.unique("g"), max_batch_bytes=1024))
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return app.stats.records >= n and app.last_outcome is eosflow.Outcome.COMMITTED

        await eventually(done, timeout_s=60, what="all input processed and committed")

    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await p.start()
    try:
        for i in range(n):
            await p.send(ref, b"x", key=str(i).encode())
        await p.flush()
    finally:
        await p.stop()
    by_send = {key: part for part, key, _, _ in await read_rows(b, ref)}

    rows = await read_rows(b, keyed)
    assert len(rows) == n
    for part, key, headers, ts in rows:
        assert part == by_send[key], f"key {key!r} in partition {part}, send() used {by_send[key]}"
        assert headers == [("i", key), ("i", b"again")]
        assert ts >= started_ms
    rows = await read_rows(b, fixed)
    assert len(rows) == n
    for part in (0, 1):
        order = [int(key or b"") for pp, key, _, _ in rows if pp == part]
        assert order == [i for i in range(n) if i % 2 == part], "processing order per partition"


async def read_rows(
    b: Broker, topic: str
) -> list[tuple[int, bytes | None, list[tuple[str, bytes]], int]]:
    """(partition, key, headers, timestamp) of every committed record of ``topic``, in
    offset order per partition (``read_records``: once the markers of what was written
    before landed)."""
    recs = sorted(
        await read_records(b.bootstrap_servers, topic), key=lambda r: (r.partition, r.offset)
    )
    return [(r.partition, r.key, list(r.headers), r.timestamp) for r in recs]
