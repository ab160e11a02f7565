"""Testing a processor with eosflow's test kit, as a user's project would.

Installing eosflow registers its pytest plugin, which gives a test the in-process Kafka
test cluster (``eosflow_cluster``) and the broker ladder (``eosflow_broker``); the test
extra brings pytest-asyncio, which the fixtures need. Run it with
``pytest examples/test_shout.py``.

The first test checks the processor's output and that every input was handled exactly
once. The second makes the broker's answer to the first commit be lost (the request is
applied, its answer never arrives): eosflow cannot know whether the transaction
committed, recovers the producer, reads the committed offsets again, and the output
still holds every input exactly once.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer

import eosflow
from eosflow.testing import FakeCluster, check_exactly_once, read_topic

GREETINGS = [f"hello {i}".encode() for i in range(200)]


class Shout(eosflow.Processor):
    async def process(self, record: eosflow.Record) -> eosflow.Output:
        return eosflow.Output("loud", (record.value or b"").upper(), key=record.key)


async def _prepare(cluster: FakeCluster) -> eosflow.EosConfig:
    cluster.create_topic("greetings", 2)
    cluster.create_topic("loud", 1)
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
    await producer.start()
    for i, value in enumerate(GREETINGS):
        await producer.send("greetings", value, key=f"k{i}".encode())
    await producer.stop()
    return eosflow.EosConfig(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id="shout",
        input_topics=("greetings",),
        transactional_id="shout-1",
        session_timeout_s=6,
        transaction_timeout_s=5,
    )


async def _run_until_done(app: eosflow.EosApp, records: int) -> None:
    """Wait, at most 30 s, until ``records`` are processed and committed."""
    async with asyncio.timeout(30):
        while app.stats.records < records or app.in_transaction:
            if app.failure is not None:
                raise app.failure
            await asyncio.sleep(0.05)


async def test_every_greeting_is_shouted_once(eosflow_cluster: FakeCluster) -> None:
    config = await _prepare(eosflow_cluster)
    async with eosflow.EosApp(Shout(), config) as app:
        await _run_until_done(app, len(GREETINGS))
    out = await read_topic(eosflow_cluster.bootstrap_servers, "loud")
    assert sorted(value for _p, _o, _k, value in out) == sorted(v.upper() for v in GREETINGS)
    report = await check_exactly_once(
        eosflow_cluster.bootstrap_servers, "greetings", "loud", group_id="shout"
    )
    assert report.ok, report.summary()


async def test_a_lost_commit_answer_duplicates_nothing(eosflow_cluster: FakeCluster) -> None:
    config = await _prepare(eosflow_cluster)
    lost = eosflow_cluster.intercept("EndTxn", drop_response=True)
    async with eosflow.EosApp(Shout(), config) as app:
        await _run_until_done(app, len(GREETINGS))
    assert lost.hits == 1  # the fault happened
    report = await check_exactly_once(
        eosflow_cluster.bootstrap_servers, "greetings", "loud", group_id="shout"
    )
    assert report.ok, report.summary()
