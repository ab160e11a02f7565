"""The transaction's record limit after a retriable failure: halved, then grown back."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from kit import eventually

import eosflow
from eosflow.testing import FakeCluster, check_exactly_once

LIMIT = 200


class RetryOnce(eosflow.Processor):
    """A batch pass-through whose first batch asks for a retry (as a Spark job past its
    budget does); it records every batch's size."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        self.sizes.append(len(records))
        if len(self.sizes) == 1:
            raise eosflow.TransactionError("too slow this time")
        return [eosflow.Output("out", r.value, key=r.key) for r in records]


async def _run_retry_once(c: FakeCluster, n: int, **settings: object) -> RetryOnce:
    """``n`` records through a ``RetryOnce`` app until all are committed, exactly once;
    returns the processor (its batch sizes)."""
    c.create_topic("in", 1)
    c.create_topic("out", 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, linger_ms=5)
    await p.start()
    await asyncio.gather(*[await p.send("in", b"v", key=f"k{i}".encode()) for i in range(n)])
    await p.stop()
    proc = RetryOnce()
    config = eosflow.EosConfig(
        bootstrap_servers=c.bootstrap_servers,
        group_id="g",
        input_topics=("in",),
        transactional_id="tx-limit",
        commit_interval_s=0.5,
        **settings,  # type: ignore[arg-type]
    )
    app = eosflow.EosApp(proc, config)
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return sum(c.committed("g").values()) == n

        await eventually(done, timeout_s=60, what="all committed")
    assert app.stats.aborted == 1
    report = await check_exactly_once(c.bootstrap_servers, "in", "out", group_id="g")
    assert report.ok, report.summary()
    return proc


# Fails without the regrowth in Engine._one_transaction: every batch after the failure
# stays at LIMIT // 2.
async def test_limit_halved_by_a_retriable_failure_grows_back(
    eosflow_cluster: FakeCluster,
) -> None:
    proc = await _run_retry_once(
        eosflow_cluster, 3000, max_records_per_txn=LIMIT, process_ahead=False
    )
    assert proc.sizes[:2] == [LIMIT, LIMIT // 2], proc.sizes
    # a quarter more per commit: 100, 125, 156, 195, then the cap again
    assert proc.sizes[2:6] == [125, 156, 195, LIMIT], proc.sizes


# A failed transaction that held fewer records than the limit: its retry holds half of
# what it held. Halving the limit instead left a Spark job of 8 records failing through
# 12 aborts (20,000 halved down to 4) before a retry held fewer: 51 s of a test.
async def test_the_retry_of_a_small_failed_transaction_holds_half_of_it(
    eosflow_cluster: FakeCluster,
) -> None:
    proc = await _run_retry_once(eosflow_cluster, 40)
    assert proc.sizes[:2] == [40, 20], proc.sizes
