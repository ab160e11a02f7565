"""The session on transactions v2 (KIP-890 part 2, ``transactions_v2=True``), each
mechanism of ``_aiokafka/_txn_v2`` driven on the test cluster (whose 4.0 profile
finalizes transaction.version 2); the comment above each test names the mutations it
caught. The protocol itself is held against genuine Kafka by
``tests/contract/test_transactions_v2_protocol.py``."""

from __future__ import annotations

import dataclasses

import pytest
from aiokafka import AIOKafkaProducer
from kit import (
    Upper,
    broker_has_kip848,
    broker_has_txn_v2,
    create_topic,
    eventually,
    ladder_config,
    session_of,
)
from test_end_to_end import seed as seed_topic
from test_mechanisms import Gate, assert_exactly_once, cfg, seed, until

import eosflow
from eosflow import _aiokafka as ak
from eosflow._protocol import _codes as codes
from eosflow.testing import FakeCluster, TxnSettings, check_exactly_once
from eosflow.testing._ladder import Broker, fake_settings


def epoch_of(app: eosflow.EosApp) -> int:
    return ak.producer_identity(session_of(app).producer)[1]  # type: ignore[union-attr]


def switched(app: eosflow.EosApp) -> bool:
    return ak.transactions_v2(session_of(app).producer)  # type: ignore[union-attr]


# Every commit moves the producer's epoch (EndTxn v5's answer adopted, sequences from 0),
# and neither AddPartitionsToTxn nor AddOffsetsToTxn is sent. Mutations caught: the
# answered epoch not adopted (each next transaction fenced and recovered); sequences
# kept across the bump (OUT_OF_ORDER_SEQUENCE_NUMBER, recovered); partitions added the
# v1 way (AddPartitionsToTxn seen); offsets added the v1 way (AddOffsetsToTxn seen).
async def test_every_commit_bumps_the_epoch_without_add_requests(
    eosflow_cluster: FakeCluster,
) -> None:
    c = eosflow_cluster
    await seed(c, n=600, partitions=3)
    adds = c.intercept("AddPartitionsToTxn", times=None)  # seen, let through
    offsets = c.intercept("AddOffsetsToTxn", times=None)
    app = eosflow.EosApp(
        Gate("out"), cfg(c, transactions_v2=True, max_records_per_txn=100, commit_interval_s=0.05)
    )
    async with app:
        await until(app, lambda: sum(c.committed("g", "in").values()) == 600, "all committed")
        first = c.txns.txns["tx-1"]
        assert switched(app)
        assert epoch_of(app) == first.epoch  # the producer runs under the coordinator's
    assert app.stats.committed >= 6 and app.stats.recovered == 0 and app.stats.aborted == 0
    assert first.epoch >= app.stats.committed  # one bump per EndTxn (from epoch 0)
    assert (adds.hits, offsets.hits) == (0, 0)
    await assert_exactly_once(c, 600)


# The first write of a transaction adds its partition while the last one's markers are
# still being written, for longer (150 ms) than the leader retries it itself (100 ms):
# CONCURRENT_TRANSACTIONS reaches the producer, which retries. Mutation caught: the
# produce handler's retry of CONCURRENT_TRANSACTIONS removed (the batch failed, the app
# recovered).
async def test_a_write_racing_the_last_markers_is_retried() -> None:
    slow = TxnSettings(marker_delay_s=0.15)
    async with FakeCluster(dataclasses.replace(fake_settings(), txns=slow)) as c:
        await seed(c, n=300)
        app = eosflow.EosApp(Gate("out"), cfg(c, transactions_v2=True, max_records_per_txn=20))
        async with app:
            await until(app, lambda: sum(c.committed("g", "in").values()) == 300, "committed")
        assert c.txns.concurrent_writes >= 1  # the race happened
        assert app.stats.recovered == 0 and app.stats.aborted == 0, app.stats
        assert app.stats.committed >= 10
        await assert_exactly_once(c, 300)


# An aborted transaction bumps the epoch as a commit does, and the producer takes it on.
# Mutation caught: the answered epoch adopted after a commit only (the next transaction
# was fenced and recovered).
async def test_an_abort_bumps_the_epoch_too(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    await seed(c, n=200)
    c.intercept("TxnOffsetCommit", error=codes.UNKNOWN_MEMBER_ID)  # once: that one aborts
    app = eosflow.EosApp(Gate("out"), cfg(c, transactions_v2=True, max_records_per_txn=50))
    async with app:
        await until(app, lambda: sum(c.committed("g", "in").values()) == 200, "all committed")
        assert epoch_of(app) == c.txns.txns["tx-1"].epoch
    assert app.stats.aborted == 1 and app.stats.recovered == 0, app.stats
    assert c.txns.txns["tx-1"].epoch == app.stats.committed + app.stats.aborted
    await assert_exactly_once(c, 200)


# An EndTxn v5 whose answer is lost (applied, then the connection dropped): aiokafka's
# sender sends it again with the epoch it had, and the coordinator answers the same
# outcome with the bumped epoch (as genuine 4.4.0 does), so the session goes on without
# a recovery. Mutation caught (in the model): a resent EndTxn not answered the outcome
# (INVALID_TXN_STATE: the session recovered through KIP-360, exactly once all the same).
async def test_a_lost_end_txn_answer_is_asked_again(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    await seed(c, n=200)
    lost = c.intercept("EndTxn", drop_response=True, version=5)
    app = eosflow.EosApp(Gate("out"), cfg(c, transactions_v2=True, max_records_per_txn=50))
    async with app:
        await until(app, lambda: sum(c.committed("g", "in").values()) == 200, "all committed")
        assert epoch_of(app) == c.txns.txns["tx-1"].epoch
    assert lost.hits == 1 and app.stats.recovered == 0, app.stats
    await assert_exactly_once(c, 200)


async def lower_then_fence(c: FakeCluster, values: list[bytes]) -> None:
    """Lower the cluster's transaction.version to 1, then feed ``values`` into "in"; the
    session's next v2 write is answered with a fencing error, so it recovers."""
    c.settings = dataclasses.replace(c.settings, features={"transaction.version": 1})
    c.intercept("Produce", version=12, error=codes.INVALID_PRODUCER_EPOCH)  # once
    producer = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await producer.start()
    try:
        for value in values:
            await producer.send("in", value)
        await producer.flush()
    finally:
        await producer.stop()


# Transactions v2 is chosen again at each recovery (`transactions_v2` left at "auto"):
# kept while the cluster has it, dropped at the first recovery after its
# transaction.version was lowered. (Brokers go on serving v2 requests at level 1 --
# genuine 4.4.0 did -- so the lowering shows at the next recovery, here a fencing
# answer.) Mutations caught: the replacement producer not
# switched (v1 after the first recovery); switched by the protocols chosen at start, not
# read again (still v2 after the lowering).
async def test_transactions_v2_is_chosen_again_at_each_recovery(
    eosflow_cluster: FakeCluster,
) -> None:
    c = eosflow_cluster
    await seed(c, n=200)
    c.intercept("Produce", version=12, error=codes.INVALID_PRODUCER_EPOCH)  # once: a recovery
    app = eosflow.EosApp(Gate("out"), cfg(c, transactions_v2="auto", max_records_per_txn=50))
    async with app:
        await until(app, lambda: sum(c.committed("g", "in").values()) == 200, "committed")
        assert app.stats.recovered == 1, app.stats
        assert switched(app)  # "auto" on a cluster with transactions v2, after a recovery
        await lower_then_fence(c, [f"v{i}".encode() for i in range(200, 400)])
        await until(app, lambda: sum(c.committed("g", "in").values()) == 400, "committed")
        assert app.stats.recovered == 2, app.stats
        assert not switched(app)
    await assert_exactly_once(c, 400)


# `transactions_v2="on"` asks for transactions v2 whatever happens: a recovery that finds
# the cluster's transaction.version lowered stops the app with one line naming it, rather
# than going on without. Mutation caught: `_protocols.txn_v2` not raising for "on".
async def test_on_stops_at_a_recovery_that_finds_transactions_v2_gone(
    eosflow_cluster: FakeCluster,
) -> None:
    c = eosflow_cluster
    await seed(c, n=200)
    app = eosflow.EosApp(Gate("out"), cfg(c, transactions_v2="on", max_records_per_txn=50))
    with pytest.raises(eosflow.FatalError, match="transactions_v2 'on' needs transactions v2"):
        async with app:
            await until(app, lambda: sum(c.committed("g", "in").values()) == 200, "committed")
            await lower_then_fence(c, [b"one more"])

            async def stopped() -> bool:
                return app.failure is not None

            await eventually(stopped, what="the app stopping")
    assert sum(c.committed("g", "in").values()) == 200  # nothing past it committed


# On every broker of the ladder that has transactions v2 (the test cluster, genuine
# 4.4.0): exactly once, no recovery, the epoch moving with the commits; under the
# consumer group protocol too where the broker has it.
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_exactly_once_on_transactions_v2(eosflow_broker: Broker, protocol: str) -> None:
    b = eosflow_broker
    if not await broker_has_txn_v2(b.bootstrap_servers):
        pytest.skip("the broker lacks transactions v2 (KIP-890 part 2)")
    if protocol == "consumer" and not await broker_has_kip848(b.bootstrap_servers):
        pytest.skip("the broker lacks the consumer group protocol (KIP-848)")
    src, dst, group = b.unique("in"), b.unique("out"), b.unique("g")
    await create_topic(b.bootstrap_servers, src, 3)
    await create_topic(b.bootstrap_servers, dst, 1)
    n = 3000
    await seed_topic(b.bootstrap_servers, src, n, 3)
    config = ladder_config(
        b, src, group, transactions_v2=True, group_protocol=protocol, max_records_per_txn=500
    )
    app = eosflow.EosApp(Upper(dst), config)
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return app.stats.records >= n

        await eventually(done, timeout_s=120, what="every record processed")
        assert switched(app)
        epoch = epoch_of(app)  # a new transactional id starts at epoch 0
    assert app.stats.recovered == 0, app.stats
    assert app.stats.committed >= 1 and epoch >= app.stats.committed
    report = await check_exactly_once(b.bootstrap_servers, src, dst, group_id=group)
    assert report.ok, report.summary()
    assert report.inputs == n
