"""Transactions v2 (KIP-890 part 2) as the broker speaks it, on clusters that finalize
transaction.version >= 2: the test cluster's "4.0" profile (``_txn``) and genuine Kafka
4.x (``EOSFLOW_TEST_BROKER=genuine``); skipped where the broker lacks it (2.4.1).

What eosflow's transactions v2 will rest on: Produce v12 adds its partition to the
transaction and TxnOffsetCommit v5 its group, with no AddPartitionsToTxn or
AddOffsetsToTxn; every EndTxn v5 bumps the producer epoch and answers it; a resent EndTxn
with the previous epoch answers the same outcome again (an answer lost in flight can be
asked for again), the other result INVALID_TXN_STATE; a zombie's write at a past epoch is
refused. Each answer below is what genuine 4.4.0 gave.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kit import client_needing, create_topic

from eosflow import _aiokafka as ak
from eosflow._protocol import _codes as codes
from eosflow._protocol import _specs, _wire
from eosflow.testing import read_topic
from eosflow.testing._ladder import Broker

_LOADING = {
    codes.COORDINATOR_LOAD_IN_PROGRESS,
    codes.COORDINATOR_NOT_AVAILABLE,
    codes.NOT_COORDINATOR,
}


@pytest_asyncio.fixture
async def client(eosflow_broker: Broker) -> AsyncIterator[Any]:
    """An aiokafka client on the ladder's broker, which must have transactions v2."""
    async with client_needing(eosflow_broker.bootstrap_servers, "txn_v2", "transactions v2") as c:
        yield c


def _batch(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        batch_size=1 << 16,
    )
    b.append(0, int(time.time() * 1000), value, value, [])
    return bytes(b.build())


async def _retried(what: str, call: Any) -> Any:
    """``call()`` until the coordinator is loaded and not busy writing markers."""
    deadline = time.monotonic() + 30
    while True:
        r = await call()
        if r.error_code not in _LOADING | {codes.CONCURRENT_TRANSACTIONS}:
            return r
        assert time.monotonic() < deadline, f"{what}: still {r.error_code} after 30 s"
        await asyncio.sleep(0.1)


async def _coordinator(client: Any, key: str, kind: int) -> int:
    """The coordinator of ``key`` (kind 0: group, 1: transaction)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return int(await client.coordinator_lookup(kind, key))
        except KafkaError:  # a coordinator is not available until its log is loaded
            assert time.monotonic() < deadline, f"no coordinator for {key} within 30 s"
            await asyncio.sleep(0.2)


async def _produce(client: Any, node: int, body: dict[str, Any], version: int) -> int:
    """Produce of ``version``; the error code of its one partition. A topic just created
    may not have its leader ready yet (NOT_LEADER_OR_FOLLOWER for a moment)."""
    req = _wire.SpecRequest.of(_specs.PRODUCE, body, min_version=version, max_version=version)
    deadline = time.monotonic() + 10
    while True:
        resp = (await client.send(node, req)).to_object()
        code = int(resp["topics"][0]["partitions"][0]["error_code"])
        if code != codes.NOT_LEADER_OR_FOLLOWER or time.monotonic() > deadline:
            return code
        await asyncio.sleep(0.1)


@dataclass
class Txn:
    """One transactional id driven by hand with the transactions v2 requests, on a
    single-broker cluster (its coordinator leads every partition)."""

    client: Any
    topic: str
    txn_id: str = field(default_factory=lambda: f"tv2-{uuid.uuid4().hex[:8]}")
    node: int = -1
    pid: int = -1
    epoch: int = -1

    async def init(self) -> None:
        self.node = await _coordinator(self.client, self.txn_id, 1)
        body = {
            "transactional_id": self.txn_id,
            "transaction_timeout_ms": 60_000,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        req = _wire.SpecRequest.of(_specs.INIT_PRODUCER_ID, body)
        r = await _retried("InitProducerId", lambda: self.client.send(self.node, req))
        assert r.error_code == 0
        self.pid, self.epoch = r.producer_id, r.producer_epoch

    async def produce(self, value: bytes, seq: int, epoch: int | None = None) -> int:
        """Produce v12 of one record to partition 0, no AddPartitionsToTxn first."""
        epoch = self.epoch if epoch is None else epoch
        batch = _batch(self.pid, epoch, seq, value)
        body = {
            "transactional_id": self.txn_id,
            "required_acks": -1,
            "timeout": 10_000,
            "topics": [{"topic": self.topic, "partitions": [{"partition": 0, "messages": batch}]}],
        }
        return await _produce(self.client, self.node, body, 12)

    async def end(self, commit: bool, epoch: int | None = None) -> tuple[int, int, int]:
        """EndTxn v5: (error code, producer id, epoch) as answered."""
        body = {
            "transactional_id": self.txn_id,
            "producer_id": self.pid,
            "producer_epoch": self.epoch if epoch is None else epoch,
            "transaction_result": commit,
        }
        req = _wire.SpecRequest.of(_specs.END_TXN, body, min_version=5, max_version=5)
        r = await _retried("EndTxn", lambda: self.client.send(self.node, req))
        return int(r.error_code), int(r.producer_id), int(r.producer_epoch)

    async def commit_offset(self, group: str, offset: int) -> int:
        """TxnOffsetCommit v5 of partition 0, no AddOffsetsToTxn first (no member)."""
        body = {
            "transactional_id": self.txn_id,
            "group_id": group,
            "producer_id": self.pid,
            "producer_epoch": self.epoch,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": self.topic,
                    "partitions": [{"partition_index": 0, "committed_offset": offset}],
                }
            ],
        }
        req = _wire.SpecRequest.of(_specs.TXN_OFFSET_COMMIT, body, min_version=5, max_version=5)
        node = await _coordinator(self.client, group, 0)
        resp = (await self.client.send(node, req)).to_object()
        return int(resp["topics"][0]["partitions"][0]["error_code"])


async def served_by_version(client: Any, bootstrap_servers: str, topic: str, level: int) -> None:
    """A v2 transaction (Produce v12 with no AddPartitionsToTxn, EndTxn v5) on a cluster
    finalizing ``transaction.version`` ``level``: served, the epoch bumped, from level 1
    on -- though level 1 tells clients to send v1 (genuine 4.4.0) -- and Produce v12
    refused UNSUPPORTED_VERSION at level 0."""
    t = Txn(client, topic)
    await t.init()
    if level == 0:
        assert await t.produce(b"v2 refused", 0) == codes.UNSUPPORTED_VERSION
        return
    assert await t.produce(b"v2 served", 0) == 0
    assert await t.end(True) == (0, t.pid, t.epoch + 1)
    values = [r[3] for r in await read_topic(bootstrap_servers, topic)]
    assert values == [b"v2 served"]


async def _topic(b: Broker) -> str:
    topic = b.unique("tv2")
    await create_topic(b.bootstrap_servers, topic, 1)
    return topic


async def test_every_end_bumps_the_epoch_and_produce_adds_its_partition(
    eosflow_broker: Broker, client: Any
) -> None:
    """Produce v12 needs no AddPartitionsToTxn; EndTxn v5 answers the next epoch, and
    resent with the previous one answers the same outcome (the other result
    INVALID_TXN_STATE); a write at the past epoch is refused; the next transaction starts
    its sequences at 0 under the new epoch; read_committed sees only what committed."""
    b = eosflow_broker
    t = Txn(client, await _topic(b))
    await t.init()
    e0 = t.epoch
    assert await t.produce(b"committed", 0) == 0
    assert await t.end(True) == (0, t.pid, e0 + 1)
    assert await t.end(True, epoch=e0) == (0, t.pid, e0 + 1)  # the answer asked again
    assert (await t.end(False, epoch=e0))[0] == codes.INVALID_TXN_STATE
    t.epoch = e0 + 1
    assert await t.produce(b"zombie", 1, epoch=e0) == codes.INVALID_PRODUCER_EPOCH
    assert await t.produce(b"aborted", 0) == 0
    assert await t.end(False) == (0, t.pid, e0 + 2)
    values = [r[3] for r in await read_topic(b.bootstrap_servers, t.topic)]
    assert values == [b"committed"]
    written = await read_topic(b.bootstrap_servers, t.topic, committed_only=False)
    assert [r[3] for r in written] == [b"committed", b"aborted"]  # no zombie, none lost


async def test_an_abort_with_nothing_open_bumps_the_epoch(
    eosflow_broker: Broker, client: Any
) -> None:
    """EndTxn v5 abort with no transaction open (no write or offset reached the broker)
    still bumps the epoch, and resent answers the same; a commit with nothing open is
    INVALID_TXN_STATE -- so a transaction whose only request never arrived ends cleanly."""
    b = eosflow_broker
    t = Txn(client, await _topic(b))
    await t.init()
    e0 = t.epoch
    assert await t.end(False) == (0, t.pid, e0 + 1)
    assert await t.end(False, epoch=e0) == (0, t.pid, e0 + 1)
    t.epoch = e0 + 1
    assert (await t.end(True))[0] == codes.INVALID_TXN_STATE
    assert await t.end(False) == (0, t.pid, e0 + 2)


async def test_offsets_join_the_transaction_without_add_offsets(
    eosflow_broker: Broker, client: Any
) -> None:
    """TxnOffsetCommit v5 needs no AddOffsetsToTxn: the offset is applied when the
    transaction commits (read back with a stable fetch)."""
    b = eosflow_broker
    t = Txn(client, await _topic(b))
    await t.init()
    group = b.unique("tv2-group")
    assert await t.produce(b"v", 0) == 0
    assert await t.commit_offset(group, 7) == 0
    code, _, t.epoch = await t.end(True)
    assert code == 0
    consumer = AIOKafkaConsumer(bootstrap_servers=b.bootstrap_servers)
    await consumer.start()
    try:
        tp = TopicPartition(t.topic, 0)
        assert await ak.fetch_committed(consumer, group, [tp], True, 10.0) == {tp: 7}
    finally:
        await consumer.stop()


async def test_produce_v11_without_add_partitions_is_abortable(
    eosflow_broker: Broker, client: Any
) -> None:
    """Before v12 a partition must be added first: Produce v11 to one that was not
    answers TRANSACTION_ABORTABLE (KIP-890 part 1), so a client on the old versions keeps
    the v1 rules on a transactions v2 cluster."""
    b = eosflow_broker
    t = Txn(client, await _topic(b))
    await t.init()
    batch = _batch(t.pid, t.epoch, 0, b"v")
    body = {
        "transactional_id": t.txn_id,
        "required_acks": -1,
        "timeout": 10_000,
        "topics": [{"topic": t.topic, "partitions": [{"partition": 0, "messages": batch}]}],
    }
    assert await _produce(client, t.node, body, 11) == codes.TRANSACTION_ABORTABLE
