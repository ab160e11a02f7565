"""Broker contract: transactional visibility, offsets in transactions, fencing, timeouts.

These run unchanged against the test cluster and a genuine Kafka (EOSFLOW_TEST_BOOTSTRAP).
"""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.structs import OffsetAndMetadata
from kit import create_topic, eventually, read_all

from eosflow.testing import FakeCluster
from eosflow.testing._ladder import Broker


async def _producer(broker: Broker, txn_id: str, timeout_ms: int = 60000) -> AIOKafkaProducer:
    p = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap_servers,
        transactional_id=txn_id,
        transaction_timeout_ms=timeout_ms,
    )
    await p.start()
    return p


async def test_commit_and_abort_visibility_for_live_and_late_readers(
    eosflow_broker: Broker,
) -> None:
    b = eosflow_broker
    topic = b.unique("vis")
    await create_topic(b.bootstrap_servers, topic, 2)
    live = AIOKafkaConsumer(
        topic,
        bootstrap_servers=b.bootstrap_servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=b.unique("live"),
    )
    await live.start()
    p = await _producer(b, b.unique("tx"))
    try:
        async with p.transaction():
            for i in range(6):
                await p.send(topic, f"c1-{i}".encode(), partition=i % 2)
        await p.begin_transaction()
        for i in range(4):
            await p.send(topic, f"ab-{i}".encode(), partition=i % 2)
        await p.abort_transaction()
        async with p.transaction():
            for i in range(6):
                await p.send(topic, f"c2-{i}".encode(), partition=i % 2)
        seen: list[bytes] = []

        async def live_has_all() -> bool:
            batch = await live.getmany(timeout_ms=200)
            seen.extend(r.value for recs in batch.values() for r in recs)
            return len(seen) >= 12

        await eventually(live_has_all, what="live reader sees both committed transactions")
    finally:
        await p.stop()
        await live.stop()
    assert sorted(seen) == sorted(
        [f"c1-{i}".encode() for i in range(6)] + [f"c2-{i}".encode() for i in range(6)]
    )
    late = [v for _, _, v in await read_all(b.bootstrap_servers, topic)]
    assert sorted(late) == sorted(seen), "a reader starting after the abort must see every commit"
    raw = [v for _, _, v in await read_all(b.bootstrap_servers, topic, committed_only=False)]
    assert len(raw) == 16, "read_uncommitted sees the aborted records too"


async def test_open_transaction_holds_the_last_stable_offset(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic = b.unique("lso")
    await create_topic(b.bootstrap_servers, topic)
    tp = TopicPartition(topic, 0)
    plain = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await plain.start()
    p = await _producer(b, b.unique("tx"))
    committed = AIOKafkaConsumer(
        bootstrap_servers=b.bootstrap_servers, isolation_level="read_committed"
    )
    uncommitted = AIOKafkaConsumer(bootstrap_servers=b.bootstrap_servers)
    await committed.start()
    await uncommitted.start()
    try:
        await plain.send_and_wait(topic, b"before", partition=0)
        await p.begin_transaction()
        await (await p.send(topic, b"open", partition=0))
        await plain.send_and_wait(topic, b"after", partition=0)
        assert (await committed.end_offsets([tp]))[tp] == 1, "LSO stops at the open txn"
        assert (await uncommitted.end_offsets([tp]))[tp] == 3, "HW includes everything"
        await p.commit_transaction()

        async def lso_moved() -> bool:
            return (await committed.end_offsets([tp]))[tp] == 4  # 3 records + marker

        await eventually(lso_moved, what="LSO advances past the commit marker")
    finally:
        for c in (plain, p, committed, uncommitted):
            await c.stop()
    assert [v for _, _, v in await read_all(b.bootstrap_servers, topic)] == [
        b"before",
        b"open",
        b"after",
    ]


async def test_send_offsets_commit_and_abort(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic, group = b.unique("offs"), b.unique("grp")
    await create_topic(b.bootstrap_servers, topic)
    tp = TopicPartition(topic, 0)
    p = await _producer(b, b.unique("tx"))
    reader = AIOKafkaConsumer(
        bootstrap_servers=b.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    await reader.start()
    try:
        async with p.transaction():
            await p.send(topic, b"x", partition=0)
            await p.send_offsets_to_transaction({tp: OffsetAndMetadata(7, "")}, group)

        async def committed_is(n: int | None) -> bool:
            return await reader.committed(tp) == n

        await eventually(lambda: committed_is(7), what="committed offset 7 visible")
        await p.begin_transaction()
        await p.send_offsets_to_transaction({tp: OffsetAndMetadata(9, "")}, group)
        await p.abort_transaction()
        assert await reader.committed(tp) == 7, "aborted offsets are dropped"
    finally:
        await p.stop()
        await reader.stop()


async def test_new_incarnation_fences_the_old_producer(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic, txn_id = b.unique("fence"), b.unique("tx")
    await create_topic(b.bootstrap_servers, topic)
    old = await _producer(b, txn_id)
    await old.begin_transaction()
    await (await old.send(topic, b"zombie", partition=0))
    new = await _producer(b, txn_id)  # bumps the epoch and aborts old's transaction
    try:
        async with new.transaction():
            await new.send(topic, b"fresh", partition=0)
        with pytest.raises((ProducerFenced, KafkaError)):
            await old.commit_transaction()
    finally:
        await new.stop()
        await old.stop()
    assert [v for _, _, v in await read_all(b.bootstrap_servers, topic)] == [b"fresh"]


async def test_transaction_timeout_aborts_and_fences(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic = b.unique("tmo")
    await create_topic(b.bootstrap_servers, topic)
    tp = TopicPartition(topic, 0)
    p = await _producer(b, b.unique("tx"), timeout_ms=1000)
    reader = AIOKafkaConsumer(
        bootstrap_servers=b.bootstrap_servers, isolation_level="read_committed"
    )
    await reader.start()
    try:
        await p.begin_transaction()
        await (await p.send(topic, b"never", partition=0))
        assert (await reader.end_offsets([tp]))[tp] == 0

        async def aborted() -> bool:
            return (await reader.end_offsets([tp]))[tp] == 2  # record + abort marker

        # the broker's sweep period bounds how long this takes (10 s on genuine Kafka)
        await eventually(
            aborted,
            timeout_s=b.txn_sweep_interval_s + 15,
            what="coordinator aborts the timed-out transaction",
        )
        with pytest.raises((ProducerFenced, KafkaError)):
            await p.commit_transaction()
    finally:
        await p.stop()
        await reader.stop()
    assert await read_all(b.bootstrap_servers, topic) == []


async def test_state_survives_restart(eosflow_cluster: FakeCluster) -> None:
    # Restarting a broker is only possible on the test cluster.
    c = eosflow_cluster
    c.create_topic("r", 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id="r-tx")
    await p.start()
    async with p.transaction():
        await p.send("r", b"kept", partition=0)
    await p.stop()
    port = c.port
    await c.stop()
    await c.start()
    assert c.port == port
    assert [v for _, _, v in await read_all(c.bootstrap_servers, "r")] == [b"kept"]
