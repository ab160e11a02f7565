"""When a transaction ends: at the commit interval, at its caps, or -- for process() --
as soon as its input has caught up, no sooner than ``min_transaction_s`` after it began
(issue 22: a record at a low rate does not wait for the interval; a trickle of input
does not turn into a commit storm)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer
from kit import app_config, eventually

import eosflow
from eosflow.testing import FakeCluster


class Copy(eosflow.Processor):
    async def process(self, record: eosflow.Record) -> eosflow.Output:
        return eosflow.Output("out", record.value)


@pytest.fixture
async def cluster(cluster: FakeCluster) -> FakeCluster:
    cluster.create_topic("in", 1)
    cluster.create_topic("out", 1)
    return cluster


def cfg(c: FakeCluster, **kw: object) -> eosflow.EosConfig:
    return app_config(c, **kw)


# A lone record commits once its transaction is min_transaction_s old, not after the
# 3 s interval. Make the fill loop wait for the deadline (the old rule) and it takes 3 s.
async def test_a_caught_up_transaction_commits_before_its_interval(cluster: FakeCluster) -> None:
    c = cluster
    app = eosflow.EosApp(Copy(), cfg(c, commit_interval_s=3.0, min_transaction_s=0.05))
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await p.start()
    async with app:
        await eventually(
            lambda: asyncio.sleep(0, bool(app.assigned)), timeout_s=20, what="assigned"
        )
        sent = time.monotonic()
        await (await p.send("in", b"one"))
        await eventually(
            lambda: asyncio.sleep(0, c.committed("g").get(("in", 0)) == 1),
            timeout_s=10,
            what="the record committed",
        )
        took = time.monotonic() - sent
    await p.stop()
    assert took < 1.0, f"committed after {took:.2f} s: it waited for the interval"


# A trickle -- a record every 5 ms for 1.5 s -- with min_transaction_s 0.1 and a 1 s
# interval: transactions end when caught up, about every 0.1 s, so some 15 commits; never
# one per record (remove the floor: a commit every few ms), nor one per interval (the
# old rule: 2 or 3).
async def test_a_trickle_commits_at_a_bounded_rate(cluster: FakeCluster) -> None:
    c = cluster
    app = eosflow.EosApp(Copy(), cfg(c, commit_interval_s=1.0, min_transaction_s=0.1))
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, linger_ms=0)
    await p.start()
    async with app:
        await eventually(
            lambda: asyncio.sleep(0, bool(app.assigned)), timeout_s=20, what="assigned"
        )
        before = app.stats.committed
        started = time.monotonic()
        for i in range(300):  # the load's pace, not a synchronisation
            await asyncio.sleep(max(0.0, started + i * 0.005 - time.monotonic()))
            await p.send("in", b"%d" % i)
        await p.flush()
        await eventually(
            lambda: asyncio.sleep(0, c.committed("g").get(("in", 0)) == 300),
            timeout_s=10,
            what="all committed",
        )
        commits = app.stats.committed - before
    await p.stop()
    assert 8 <= commits <= 22, f"{commits} commits for 1.5 s of input"
