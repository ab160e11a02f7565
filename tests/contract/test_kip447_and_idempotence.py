"""Broker contract: KIP-447 fencing by generation, RequireStable, idempotent dedupe.

Requests are sent through eosflow's adapter (the same code the runtime uses), so these
tests also hold eosflow's wire declarations against the broker.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kit import create_topic, eventually

from eosflow import _aiokafka as ak
from eosflow._errors import TransientError
from eosflow._protocol import _specs, _wire
from eosflow._protocol._codes import (
    COORDINATOR_LOAD_IN_PROGRESS,
    ILLEGAL_GENERATION,
    NOT_LEADER_OR_FOLLOWER,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    UNKNOWN_MEMBER_ID,
)
from eosflow.testing._ladder import Broker


async def _member(b: Broker, group: str, topic: str) -> AIOKafkaConsumer:
    c = AIOKafkaConsumer(
        topic,
        bootstrap_servers=b.bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
        session_timeout_ms=int(max(b.min_session_timeout_s, 1.0) * 1000) * 3,
        heartbeat_interval_ms=100,
    )
    await c.start()
    return c


async def test_txn_offset_commit_v3_fences_a_stale_generation(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic, group = b.unique("z"), b.unique("zg")
    await create_topic(b.bootstrap_servers, topic, 2)
    a = await _member(b, group, topic)
    second: AIOKafkaConsumer | None = None
    txn_id = b.unique("tx")
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, transactional_id=txn_id)
    await p.start()
    try:
        await a.getmany(timeout_ms=100)

        async def a_assigned() -> bool:
            await a.getmany(timeout_ms=50)
            return len(a.assignment()) == 2

        await eventually(a_assigned, what="first member owns both partitions")
        caps = await ak.capabilities(p)
        if not caps.kip447:
            pytest.skip(f"broker lacks KIP-447 ({caps})")
        stale = ak.group_identity(a)
        second = await _member(b, group, topic)

        async def moved_on() -> bool:
            await a.getmany(timeout_ms=50)
            await second.getmany(timeout_ms=50)  # type: ignore[union-attr]
            return ak.group_identity(a).generation > stale.generation and bool(second.assignment())  # type: ignore[union-attr]

        await eventually(moved_on, what="group moves to a new generation")
        tp = TopicPartition(topic, 0)
        await p.begin_transaction()
        code = await ak.commit_offsets_in_txn(p, txn_id, group, {tp: 1}, caps, stale)
        assert code == ILLEGAL_GENERATION, ak.error_name(code)
        fresh = ak.group_identity(a)
        assert await ak.commit_offsets_in_txn(p, txn_id, group, {tp: 1}, caps, fresh) == 0
        await p.commit_transaction()
        gone = ak.GroupIdentity(fresh.generation, "no-such-member", None, None)
        await p.begin_transaction()
        assert (
            await ak.commit_offsets_in_txn(p, txn_id, group, {tp: 2}, caps, gone)
            == UNKNOWN_MEMBER_ID
        )
        await p.abort_transaction()
    finally:
        await p.stop()
        await a.stop()
        if second is not None:
            await second.stop()


async def test_require_stable_waits_for_pending_transactional_offsets(
    eosflow_broker: Broker,
) -> None:
    b = eosflow_broker
    topic, group = b.unique("st"), b.unique("sg")
    await create_topic(b.bootstrap_servers, topic)
    tp = TopicPartition(topic, 0)
    txn_id = b.unique("tx")
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, transactional_id=txn_id)
    await p.start()
    reader = AIOKafkaConsumer(
        bootstrap_servers=b.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    await reader.start()
    try:
        caps = await ak.capabilities(p)
        if not caps.kip447:
            pytest.skip(f"broker lacks KIP-447 ({caps})")
        no_group = ak.GroupIdentity(-1, "", None, None)
        await p.begin_transaction()
        assert await ak.commit_offsets_in_txn(p, txn_id, group, {tp: 5}, caps, no_group) == 0
        with pytest.raises(TransientError, match="UNSTABLE_OFFSET_COMMIT"):
            await ak.fetch_committed(reader, group, [tp], require_stable=True, timeout_s=0.5)
        plain = await ak.fetch_committed(reader, group, [tp], require_stable=False, timeout_s=1)
        assert plain == {tp: None}, "without RequireStable the pending offset is invisible"
        await p.commit_transaction()
        stable = await ak.fetch_committed(reader, group, [tp], require_stable=True, timeout_s=10)
        assert stable == {tp: 5}
    finally:
        await p.stop()
        await reader.stop()


async def test_idempotent_retry_is_deduplicated_and_gap_rejected(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic = b.unique("idem")
    await create_topic(b.bootstrap_servers, topic)
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await p.start()
    try:
        client = p.client
        node = client.get_random_node()
        init = _wire.SpecRequest.of(
            _specs.INIT_PRODUCER_ID,
            {
                "transactional_id": None,
                "transaction_timeout_ms": 60000,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
        resp = await client.send(node, init)
        for _ in range(100):  # the first InitProducerId of a fresh 4.x broker: retry
            if resp.error_code != COORDINATOR_LOAD_IN_PROGRESS:
                break
            await asyncio.sleep(0.02)
            resp = await client.send(node, init)
        assert resp.error_code == 0
        pid, epoch = resp.producer_id, resp.producer_epoch
        await p.partitions_for(topic)
        leader = client.cluster.leader_for_partition(TopicPartition(topic, 0))

        def batch(seq: int, n: int) -> bytes:
            builder = DefaultRecordBatchBuilder(2, 0, 0, pid, epoch, seq, 1 << 20)
            for i in range(n):
                builder.append(
                    i, timestamp=None, key=None, value=f"v{seq + i}".encode(), headers=[]
                )
            return bytes(builder.build())

        async def produce(data: bytes) -> tuple[int, int]:
            r = await client.send(leader, ProduceRequest(None, -1, 30000, [(topic, [(0, data)])]))
            part = r.topics[0][1][0]
            return part[1], part[2]

        first = batch(0, 3)
        code, base = await produce(first)
        for _ in range(500):  # a new topic's leader is in Metadata a moment before it leads
            if code != NOT_LEADER_OR_FOLLOWER:
                break
            await asyncio.sleep(0.01)
            code, base = await produce(first)
        assert code == 0
        assert await produce(first) == (0, base), "a retried batch keeps its original offset"
        code, _ = await produce(batch(5, 1))
        assert code == OUT_OF_ORDER_SEQUENCE_NUMBER
        code, nxt = await produce(batch(3, 2))
        assert (code, nxt) == (0, base + 3)
    finally:
        await p.stop()
