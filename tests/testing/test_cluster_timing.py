"""Test-cluster timing that mirrors genuine Kafka, and its controls (test cluster only:
these windows are too short to hit deterministically on a real broker)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError
from kit import RawGroup, eventually

from eosflow import _aiokafka as ak
from eosflow._protocol import _codes as codes
from eosflow._protocol import _specs, _wire
from eosflow.testing import ClusterSettings, FakeCluster, GroupSettings, TxnSettings


def _settings(**txn: float) -> ClusterSettings:
    return ClusterSettings(
        groups=GroupSettings(min_session_timeout_s=0.3),
        txns=TxnSettings(sweep_interval_s=0.1, **txn),
    )


async def test_next_transaction_waits_while_markers_are_written() -> None:
    async with FakeCluster(_settings(marker_delay_s=0.5, offset_lag_s=0.5)) as c:
        c.create_topic("t", 1)
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id="cc")
        await p.start()
        try:
            async with p.transaction():
                await p.send("t", b"a", partition=0)
            pid, epoch = ak.producer_identity(p)
            add = _wire.SpecRequest.of(
                _specs.ADD_PARTITIONS_TO_TXN,
                {
                    "transactional_id": "cc",
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "topics": [{"name": "t", "partitions": [0]}],
                },
            )
            resp = (await p.client.send(0, add)).to_object()
            assert resp["results"][0]["results"][0]["error_code"] == codes.CONCURRENT_TRANSACTIONS
            await asyncio.sleep(0.6)  # past the modelled marker delay
            resp = (await p.client.send(0, add)).to_object()
            assert resp["results"][0]["results"][0]["error_code"] == 0
        finally:
            await p.stop()


async def test_plain_offset_fetch_lags_the_commit_stable_fetch_waits() -> None:
    async with FakeCluster(_settings(marker_delay_s=0.0, offset_lag_s=0.4)) as c:
        c.create_topic("t", 1)
        tp = TopicPartition("t", 0)
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id="lag")
        reader = AIOKafkaConsumer(
            bootstrap_servers=c.bootstrap_servers, group_id="g", enable_auto_commit=False
        )
        await p.start()
        await reader.start()
        try:
            caps = await ak.capabilities(p)
            await p.begin_transaction()
            assert (
                await ak.commit_offsets_in_txn(
                    p, "lag", "g", {tp: 9}, caps, ak.GroupIdentity(-1, "", None, None)
                )
                == 0
            )
            await p.commit_transaction()
            committed_at = time.monotonic()
            assert await reader.committed(tp) is None, "previous offset inside the window"
            stable = await ak.fetch_committed(reader, "g", [tp], True, timeout_s=5)
            assert stable == {tp: 9}
            assert time.monotonic() - committed_at >= 0.3, "stable fetch waited for the window"
            assert await reader.committed(tp) == 9
        finally:
            await p.stop()
            await reader.stop()


async def test_expire_member_control() -> None:
    async with FakeCluster(_settings()) as c:
        g = RawGroup(c.bootstrap_servers, "x")
        await g.start()
        try:
            joined = await g.join()
            gen, mid = int(joined["generation_id"]), str(joined["member_id"])  # type: ignore[call-overload]
            await g.sync(gen, mid, None, {mid: b""})
            assert await g.heartbeat(gen, mid) == 0
            assert c.expire_member("x") == [mid]
            assert await g.heartbeat(gen, mid) == codes.UNKNOWN_MEMBER_ID
        finally:
            await g.close()


async def test_fault_delay_and_drop() -> None:
    async with FakeCluster(_settings()) as c:
        c.create_topic("t", 1)
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, request_timeout_ms=3000)
        await p.start()
        try:
            c.intercept("Produce", delay_s=0.5)
            started = time.monotonic()
            await p.send_and_wait("t", b"slow", partition=0)
            assert time.monotonic() - started >= 0.5
            rule = c.intercept("Metadata", drop=True)
            with pytest.raises((KafkaConnectionError, KafkaError, asyncio.TimeoutError)):
                await asyncio.wait_for(p.client.send(0, _metadata_request()), 5)
            assert rule.hits == 1
        finally:
            await p.stop()


# Metadata carries errors per topic: an error rule answers each named topic with the
# error and no partitions, and lets a request naming no topics through untouched.
async def test_fault_error_answer_to_metadata_is_per_topic() -> None:
    from aiokafka.protocol.metadata import MetadataRequest

    async with FakeCluster(_settings()) as c:
        c.create_topic("t", 2)
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
        await p.start()
        try:
            rule = c.intercept("Metadata", error=codes.LEADER_NOT_AVAILABLE, times=None)
            untouched = await p.client.send(0, MetadataRequest([]))
            assert rule.hits == 0 and untouched.brokers
            resp = (await p.client.send(0, _metadata_request())).to_object()
            assert rule.hits == 1
            assert [(t["topic"], t["error_code"], t["partitions"]) for t in resp["topics"]] == [
                ("t", codes.LEADER_NOT_AVAILABLE, [])
            ]
            assert resp["brokers"][0]["port"] == c.port
            c.remove_fault(rule)
            c.remove_fault(rule)  # removing twice is harmless
            resp = (await p.client.send(0, _metadata_request())).to_object()
            assert (
                resp["topics"][0]["error_code"] == 0 and len(resp["topics"][0]["partitions"]) == 2
            )
        finally:
            await p.stop()


def _metadata_request() -> object:
    from aiokafka.protocol.metadata import MetadataRequest

    return MetadataRequest(["t"])


async def test_crash_loses_the_answer_to_a_request_in_flight() -> None:
    async with FakeCluster(_settings()) as c:
        c.create_topic("t", 1)
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id="cr")
        await p.start()
        await p.begin_transaction()
        await (await p.send("t", b"x", partition=0))
        rule = c.intercept("EndTxn", hold=True)
        commit = asyncio.create_task(p.commit_transaction())
        await rule.matched()
        await c.crash()
        rule.release()
        assert not commit.done(), "the client got no answer"
        await c.start()
        await asyncio.wait_for(commit, 30)  # aiokafka retries EndTxn; the retry commits
        await p.stop()

        async def complete() -> bool:  # markers land marker_delay_s after EndTxn answers
            return c.txns.txns["cr"].state == "CompleteCommit"

        await eventually(complete, timeout_s=5, what="transaction completes")
