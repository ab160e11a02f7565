"""Broker contract: DescribeTransactions (KIP-664, Kafka 3.0+), what the group's page
shows of each member's transactional id. Runs unchanged against the test cluster and a
genuine Kafka; a cluster before 3.0 answers None (the API is not served)."""

from __future__ import annotations

from aiokafka import AIOKafkaProducer
from kit import create_topic, eventually

from eosflow import _aiokafka as ak
from eosflow._security import KafkaSecurity
from eosflow.testing._ladder import Broker


def _serves(b: Broker) -> bool:
    if b.kafka is not None:
        return int(b.kafka.version.split(".")[0]) >= 3
    return b.cluster is None or b.cluster.settings.profile == "4.0"


# An open transaction is Ongoing with its start and its partition; once committed and
# its markers written, CompleteCommit with no partition left; an id never initialised
# is left out, not an error. Mutation caught (test cluster): an unknown id answered as
# found (listed).
async def test_a_transaction_described_open_then_committed(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    bs, sec = b.bootstrap_servers, KafkaSecurity()
    topic, txn_id = b.unique("dtx"), b.unique("dtx-id")
    await create_topic(bs, topic, 2)
    p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txn_id)
    await p.start()
    try:
        await p.begin_transaction()
        await p.send_and_wait(topic, b"x", partition=1)
        seen = await ak.describe_transactions(bs, sec, [txn_id, b.unique("never")])
        if not _serves(b):
            assert seen is None
            return
        assert seen is not None and list(seen) == [txn_id], seen
        open_ = seen[txn_id]
        assert open_.state == "Ongoing" and open_.partitions == ((topic, 1),), open_
        assert open_.started_ms > 0 and open_.producer_id >= 0 and open_.timeout_ms > 0
        await p.commit_transaction()

        async def ended() -> bool:
            now = await ak.describe_transactions(bs, sec, [txn_id])
            assert now is not None
            t = now[txn_id]
            return t.state == "CompleteCommit" and t.partitions == ()

        await eventually(ended, timeout_s=10, what="the transaction described as committed")
    finally:
        await p.stop()


# While a commit's markers are written, Kafka describes only the partitions not yet
# marked. The test cluster holds one topic's markers back (a slow leader) to show it:
# PrepareCommit with the held topic's partition alone. Mutation caught: the marked
# partitions kept (both listed).
async def test_an_ending_transaction_lists_only_its_unmarked_partitions(
    eosflow_broker: Broker,
) -> None:
    b = eosflow_broker
    cluster = b.require_fake("markers held back")
    bs, sec = b.bootstrap_servers, KafkaSecurity()
    fast, slow, txn_id = b.unique("dtx-fast"), b.unique("dtx-slow"), b.unique("dtx-id")
    await create_topic(bs, fast, 1)
    await create_topic(bs, slow, 1)
    cluster.delay_markers(slow, 5.0)
    p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=txn_id)
    await p.start()
    try:
        await p.begin_transaction()
        await p.send_and_wait(fast, b"x")
        await p.send_and_wait(slow, b"y")
        await p.commit_transaction()

        async def fast_marked() -> bool:
            now = await ak.describe_transactions(bs, sec, [txn_id])
            assert now is not None
            t = now[txn_id]
            assert t.state == "PrepareCommit", t
            return t.partitions == ((slow, 0),)

        await eventually(fast_marked, timeout_s=4, what="only the held topic still listed")
    finally:
        cluster.delay_markers(slow, 0)
        await p.stop()
