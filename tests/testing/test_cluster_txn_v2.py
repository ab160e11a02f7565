"""Transactions v2 where only the test cluster can be driven there: an epoch bump at the
top of the epoch range rotates the producer id (as Kafka does), and the transaction the
old id wrote still closes -- its markers carry the old id; v2 requests are served from
transaction.version 1 on, refused at 0 (genuine 4.4.0's side:
``tests/genuine/test_launcher.py::test_kafka_4_protocols_are_detected_from_finalized_features``)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from eosflow.testing import FakeCluster, read_topic
from eosflow.testing._ladder import fake_settings

sys.path.insert(0, str(Path(__file__).parents[1] / "contract"))
from test_transactions_v2_protocol import Txn, served_by_version


# Mutation caught: the markers written under the rotated producer id (the old id's
# transaction never closed: read_committed saw nothing).
async def test_a_bump_at_the_top_of_the_epochs_closes_the_old_ids_transaction() -> None:
    async with FakeCluster(fake_settings()) as c:
        c.create_topic("top", 1)
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
        await p.start()
        try:
            t = Txn(p.client, "top")
            await t.init()
            c.txns.txns[t.txn_id].epoch = t.epoch = 32766  # the next bump rotates the id
            assert await t.produce(b"last of the old id", 0) == 0
            code, pid, epoch = await t.end(True)
            assert code == 0 and pid != t.pid and epoch == 0
        finally:
            await p.stop()
        values = [r[3] for r in await read_topic(c.bootstrap_servers, "top", timeout_s=5)]
        assert values == [b"last of the old id"]


# Mutations caught: EndTxn v5 answered by the v1 rules at level 1 (no bump), as when the
# test cluster tied the v2 rules to level 2; Produce v12 served at level 0.
@pytest.mark.parametrize("level", [0, 1])
async def test_v2_requests_are_served_from_transaction_version_1(
    level: int,
) -> None:
    settings = dataclasses.replace(fake_settings(), features={"transaction.version": level})
    async with FakeCluster(settings) as c:
        c.create_topic("lowered", 1)
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
        await p.start()
        try:
            await served_by_version(p.client, c.bootstrap_servers, "lowered", level)
        finally:
            await p.stop()
