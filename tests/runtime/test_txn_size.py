"""How much a transaction holds, and that processing lets the event loop run (issue 22):
the byte cap bounds every transaction, polls included; the record cap too; a processor
that never awaits still lets the commit, the fetcher and the sender go on."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer
from kit import app_config, eventually

import eosflow
from eosflow.testing import FakeCluster

RECORD = 1000  # bytes of each input value


class Copy(eosflow.Processor):
    async def process(self, record: eosflow.Record) -> eosflow.Output:
        return eosflow.Output("out", record.value, key=record.key)


class Sizes(eosflow.Observer):
    def __init__(self) -> None:
        self.committed: list[int] = []

    def transaction_ended(self, report: eosflow.TransactionReport) -> None:
        if report.outcome is eosflow.Outcome.COMMITTED:
            self.committed.append(report.records)


@pytest.fixture
async def cluster(cluster: FakeCluster) -> FakeCluster:
    cluster.create_topic("in", 2)
    cluster.create_topic("out", 2)
    return cluster


def cfg(c: FakeCluster, **kw: object) -> eosflow.EosConfig:
    return app_config(c, **({"commit_interval_s": 2.0} | kw))  # never the bound here


async def seed(c: FakeCluster, n: int, size: int = RECORD) -> None:
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, linger_ms=5)
    await p.start()
    value = b"v" * size
    futs = [await p.send("in", value, key=b"%06d" % i, partition=i % 2) for i in range(n)]
    await asyncio.gather(*futs)
    await p.stop()


async def copy_all(c: FakeCluster, n: int, config: eosflow.EosConfig) -> list[int]:
    sizes = Sizes()
    app = eosflow.EosApp(Copy(), config, observers=[sizes])
    async with app:
        await eventually(
            lambda: asyncio.sleep(0, sum(sizes.committed) >= n), timeout_s=60, what="all copied"
        )
    assert sum(sizes.committed) == n
    return sizes.committed


# 600 records of 1,000 B already waiting, a byte cap of 20,000 B: after the first
# transaction (its poll is sized before the record size is known), each holds at most
# 21 records, with or without work done ahead. Size the polls by records alone (drop
# _room) and a poll hands over all a fetch buffered: hundreds at once.
@pytest.mark.parametrize("ahead", [True, False], ids=["ahead", "serial"])
async def test_the_byte_cap_bounds_every_transaction(cluster: FakeCluster, ahead: bool) -> None:
    c = cluster
    await seed(c, 600)
    config = cfg(c, max_bytes_per_txn=20 * RECORD, max_records_per_txn=10_000, process_ahead=ahead)
    sizes = await copy_all(c, 600, config)
    assert max(sizes[1:]) <= 21, sizes


# The record cap alone (no byte cap) bounds transactions the same way.
async def test_the_record_cap_bounds_every_transaction(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, 300)
    sizes = await copy_all(c, 300, cfg(c, max_bytes_per_txn=None, max_records_per_txn=25))
    assert max(sizes) <= 25 and len(sizes) >= 12, sizes


class Busy(eosflow.Processor):
    """~0.2 ms of CPU per record, never awaiting: without the loop's own yields, a chunk
    of records would hold the event loop for its whole length."""

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        until = time.perf_counter() + 0.0002
        while time.perf_counter() < until:
            pass
        return eosflow.Output("out", record.value, key=record.key)


# 20,000 records of 10 B at ~0.2 ms each, chunks sized to the 2 s interval (up to what a
# fetch buffered: thousands of such records): a ticker that asks for the loop every 1 ms
# is never late by half a second (the processing loop yields every 0.5 ms; sending a
# chunk's outputs does not yield, which the bound leaves room for). Remove the yield and
# it is late by a whole chunk: seconds.
async def test_processing_lets_the_event_loop_run(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, 20_000, size=10)
    late = 0.0
    ticking = True

    async def ticker() -> None:
        nonlocal late
        while ticking:
            asked = time.monotonic()
            await asyncio.sleep(0.001)
            late = max(late, time.monotonic() - asked - 0.001)

    sizes = Sizes()
    app = eosflow.EosApp(Busy(), cfg(c, max_bytes_per_txn=None), observers=[sizes])
    async with app:
        await eventually(
            lambda: asyncio.sleep(0, bool(app.assigned)), timeout_s=20, what="assigned"
        )
        tick = asyncio.create_task(ticker())
        await eventually(
            lambda: asyncio.sleep(0, sum(sizes.committed) >= 20_000), timeout_s=60, what="copied"
        )
        ticking = False
        await tick
    assert late < 0.5, f"the event loop waited {late:.3f} s for processing"


class Counted(eosflow.Processor):
    """A copy that keeps state, so it works ahead by default (``process_ahead``)."""

    stores = {"n": eosflow.BYTES}

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        self.state("n").put(b"seen", b"1")
        return eosflow.Output("out", record.value, key=record.key)


# 50,000 records of 10 B waiting, transactions ended by neither the interval nor the
# caught-up rule (3 s each) while the records are taken: an app that works ahead gets
# twice the default record cap, so it takes more than 20,000 in one transaction but never
# more than 40,000; one that does not, or that sets the cap (even to the default), never
# takes more than 20,000. Drop the doubling (``_sizing.caps``) and the first case holds
# 20,000 at most; drop the cap and it holds all 50,000.
@pytest.mark.parametrize(
    ("processor", "given", "over"),
    [(Counted, {}, True), (Copy, {}, False), (Counted, {"max_records_per_txn": 20_000}, False)],
    ids=["stateful", "stateless", "stateful-given"],
)
async def test_an_app_working_ahead_gets_twice_the_default_caps(
    cluster: FakeCluster, processor: type[eosflow.Processor], given: dict[str, int], over: bool
) -> None:
    c = cluster
    await seed(c, 50_000, size=10)
    config = cfg(c, commit_interval_s=3.0, min_transaction_s=3.0, **given)
    sizes = Sizes()
    app = eosflow.EosApp(processor(), config, observers=[sizes])
    async with app:
        await eventually(
            lambda: asyncio.sleep(0, sum(sizes.committed) >= 50_000), timeout_s=60, what="all"
        )
    assert sum(sizes.committed) == 50_000
    cap = 40_000 if over else 20_000
    assert max(sizes.committed) <= cap, sizes.committed
    assert (max(sizes.committed) > 20_000) is over, sizes.committed
