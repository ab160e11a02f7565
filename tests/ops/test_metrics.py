"""The metrics port of a running app, scraped over HTTP and parsed with prometheus_client's
own parser, on the ladder's broker (the test cluster, genuine Kafka in CI stage 3)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from kit import create_topic, eventually, get, ladder_config, session_of
from prometheus_client.parser import text_string_to_metric_families

import eosflow
from eosflow._ops._runner import LAG_EVERY_S
from eosflow.testing._ladder import Broker

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(app: eosflow.EosApp) -> Samples:
    port = app.ops.port
    assert port is not None
    status, text = await asyncio.to_thread(get, port, "/metrics")
    assert status == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


config = ladder_config


class Scripted(eosflow.Processor):
    """Upper-cases into ``out``; key ``bad`` raises (dead-lettered); the first time it
    meets key ``retry`` it raises a retriable ``TransactionError`` (one abort)."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.retried = False

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        if record.key == b"bad":
            raise ValueError("dead-lettered")
        if record.key == b"retry" and not self.retried:
            self.retried = True
            raise eosflow.TransactionError("scripted retriable failure")
        assert record.value is not None
        return eosflow.Output(self.out, record.value.upper(), key=record.key)


async def produce(bootstrap: str, topic: str, keys: list[bytes], partitions: int) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        futs = [
            await p.send(topic, b"v" + k, key=k, partition=i % partitions)
            for i, k in enumerate(keys)
        ]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


# Each metric moves as its event says: a commit, an abort (a retriable processing error,
# which works on any broker), a dead letter, then a rebalance when a second member joins.
async def test_metrics_follow_commits_aborts_dead_letters_and_rebalances(
    eosflow_broker: Broker,
) -> None:
    b = eosflow_broker
    src, dst, dlq, group = b.unique("in"), b.unique("out"), b.unique("dlq"), b.unique("g")
    for topic, parts in ((src, 2), (dst, 1), (dlq, 1)):
        await create_topic(b.bootstrap_servers, topic, parts)
    keys = [str(i).encode() for i in range(198)] + [b"bad", b"retry"]
    await produce(b.bootstrap_servers, src, keys, 2)
    ops = {"metrics_port": 0, "progress_interval_s": 0}
    app = eosflow.EosApp(Scripted(dst), config(b, src, group, dead_letter_topic=dlq, ops=ops))
    async with app:

        async def all_committed() -> bool:
            assert app.failure is None, app.failure
            s = await scrape(app)
            return value(s, "eosflow_records_consumed_total") == 200

        await eventually(all_committed, timeout_s=60, what="200 records committed")
        s = await scrape(app)
        assert value(s, "eosflow_records_produced_total") == 200  # 199 outputs, 1 dead letter
        assert value(s, "eosflow_records_dead_lettered_total") == 1
        committed = value(s, "eosflow_transactions_total", outcome="committed")
        assert committed == app.stats.committed >= 1
        assert value(s, "eosflow_transactions_total", outcome="aborted") == 1
        assert value(s, "eosflow_transaction_aborts_total", reason="processing_error") == 1
        assert value(s, "eosflow_transaction_aborts_total", reason="revoked") == 0
        # every commit ran each phase once; the abort skipped the offsets and heartbeat
        for phase, runs in (("offsets", 0), ("heartbeat", 0), ("flush", 1), ("end_txn", 1)):
            got = value(s, "eosflow_commit_phase_seconds_count", phase=phase)
            assert got == committed + runs, phase
        assert value(s, "eosflow_assigned_partitions") == 2
        assert value(s, "eosflow_rebalances_total") >= 1
        assert value(s, "eosflow_last_commit_timestamp_seconds") > 0

        # a second member: under the classic protocol the first gives up both partitions
        # and gets one back (a second assignment); under the consumer protocol (the
        # default where the broker has it) it gives up one and keeps the other
        assert session_of(app) is not None and session_of(app).protocols is not None
        assignments = 2 if session_of(app).protocols.group == "classic" else 1
        other = eosflow.EosApp(Scripted(dst), config(b, src, group, dead_letter_topic=dlq))
        async with other:

            async def rebalanced() -> bool:
                assert app.failure is None and other.failure is None
                s = await scrape(app)
                lagging = [k for k in s if k[0] == "eosflow_consumer_lag"]
                return (
                    value(s, "eosflow_revocations_total") >= 1
                    and value(s, "eosflow_rebalances_total") >= assignments
                    and value(s, "eosflow_assigned_partitions") == 1
                    and len(lagging) == 1  # the partition given up has no lag series left
                )

            await eventually(rebalanced, timeout_s=60, what="the rebalance in the metrics")


# Under exactly-once, lag is measured against the last stable offset: a transaction left
# open on the input holds 50 records nobody can read yet. The app's lag is 0 once it
# committed the 100 readable records, while a lag against the high watermark would say
# 50 -- and the instance is ready (caught up), not stalled.
async def test_lag_is_against_the_last_stable_offset(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    src, dst, group = b.unique("in"), b.unique("out"), b.unique("g")
    await create_topic(b.bootstrap_servers, src, 1)
    await create_topic(b.bootstrap_servers, dst, 1)
    await produce(b.bootstrap_servers, src, [str(i).encode() for i in range(100)], 1)
    async with open_transaction(b, src, 50) as open_txn:
        ops = {"metrics_port": 0, "progress_interval_s": 0}
        app = eosflow.EosApp(Scripted(dst), config(b, src, group, ops=ops))
        async with app:
            port = app.ops.port
            assert port is not None

            async def caught_up() -> bool:
                assert app.failure is None, app.failure
                s = await scrape(app)
                return (
                    value(s, "eosflow_records_consumed_total") == 100
                    and ("eosflow_consumer_lag", (("partition", "0"), ("topic", src))) in s
                    and value(s, "eosflow_consumer_lag", topic=src, partition="0") == 0
                )

            await eventually(caught_up, timeout_s=60, what="100 committed and lag 0")
            high = await high_watermark(b.bootstrap_servers, src)
            assert high - 100 == 50, "a high-watermark lag would count the open transaction"
            status, why = await asyncio.to_thread(get, port, "/readyz")
            assert (status, why) == (200, "ready: caught up\n")

            await open_txn.commit_transaction()

            async def all_done() -> bool:  # lag sampled well after the last commit: the
                s = await scrape(app)  # input's commit marker (offset 150) is no lag
                last = value(s, "eosflow_last_commit_timestamp_seconds")
                return (
                    value(s, "eosflow_records_consumed_total") == 150
                    and time.time() > last + 2 * LAG_EVERY_S
                    and value(s, "eosflow_consumer_lag", topic=src, partition="0") == 0
                )

            await eventually(all_done, timeout_s=60, what="the 50 committed later, lag 0")
            assert await asyncio.to_thread(get, port, "/readyz") == (200, "ready: caught up\n")


@contextlib.asynccontextmanager
async def open_transaction(b: Broker, topic: str, n: int) -> AsyncIterator[AIOKafkaProducer]:
    """A transactional producer that wrote ``n`` records to ``topic``[0] and left its
    transaction open (the caller may commit it)."""
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, transactional_id=b.unique("open"))
    await p.start()
    try:
        await p.begin_transaction()
        await asyncio.gather(*[await p.send(topic, b"later", partition=0) for _ in range(n)])
        yield p
    finally:
        await p.stop()


async def high_watermark(bootstrap: str, topic: str) -> int:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted")
    await c.start()
    try:
        tp = TopicPartition(topic, 0)
        return int((await c.end_offsets([tp]))[tp])
    finally:
        await c.stop()
