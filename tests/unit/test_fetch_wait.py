"""While a partition is paused, or fetched records of a partition are not all taken, the
group consumer's fetches to that broker wait at most ``SHORT_FETCH_WAIT_MS`` there
(``_aiokafka._fetch``); and with tables a poll takes what the consumer fetched, up to
``Sync.takes`` records (without, at most what may be processed and at most as many).
Both keep a partition with records from waiting behind a fetch of partitions read to
their end, which the broker holds for ``fetch_max_wait_ms``. The comment above each
test names the mutation that made it fail."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.protocol.fetch import FetchRequest
from kit import T0_MS, create_topic, eventually
from stateful import state_config, until_committed

import eosflow
from eosflow import _aiokafka as ak
from eosflow._aiokafka._fetch import AS_RECORD, SHORT_FETCH_WAIT_MS, shorten
from eosflow._checks._checker import read_records
from eosflow._engine._session import TransactSession
from eosflow._state._sync import Sync, Unsynced
from eosflow.testing import FakeCluster


def _fetched(body: dict[str, Any]) -> set[int]:
    return {p["partition"] for t in body["topics"] for p in t["partitions"]}


async def _seen(
    bodies: list[dict[str, Any]], partitions: set[int], wait_ms: int, after: int
) -> int:
    """The index of the first Fetch of ``bodies`` from ``after`` on that fetches
    ``partitions`` and waits ``wait_ms``."""
    found: list[int] = []

    async def check() -> bool:
        found[:] = [
            i
            for i, b in enumerate(bodies[after:], after)
            if _fetched(b) == partitions and b["max_wait_time"] == wait_ms
        ]
        return bool(found)

    await eventually(check, what=f"a Fetch of {partitions} waiting {wait_ms} ms")
    return found[0]


# The Fetch requests on the wire: 500 ms (the consumer's wait) with both partitions; 20
# ms with one partition paused (the fetch holds only the other); 500 again once it is
# resumed. Caught: the wait left alone on pause (paused partitions not counted by
# ``_Fetcher``: every fetch of the quiet partition held 500 ms).
async def test_fetches_wait_briefly_while_a_partition_is_paused(cluster: FakeCluster) -> None:
    boot = cluster.bootstrap_servers
    await create_topic(boot, "fw", partitions=2)
    rule = cluster.intercept("Fetch", times=None)  # only records what it sees
    consumer = AIOKafkaConsumer(
        bootstrap_servers=boot, enable_auto_commit=False, key_deserializer=AS_RECORD
    )
    await consumer.start()
    tps = [TopicPartition("fw", 0), TopicPartition("fw", 1)]
    try:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)

        first = await _seen(rule.bodies, {0, 1}, 500, 0)
        ak.pause(consumer, [tps[1]])
        paused = await _seen(rule.bodies, {0}, SHORT_FETCH_WAIT_MS, first + 1)
        ak.resume(consumer, [tps[1]])
        await _seen(rule.bodies, {0, 1}, 500, paused + 1)
        assert all(
            b["max_wait_time"] == SHORT_FETCH_WAIT_MS
            for b in rule.bodies[paused:]
            if _fetched(b) == {0}
        ), "every fetch while paused waits briefly"
    finally:
        cluster.remove_fault(rule)
        await consumer.stop()


# The group consumer (its key deserializer marks it) holds fetched records of partition
# 1 not taken yet: the fetches it sends meanwhile, of partition 0 alone (read to its
# end), wait 20 ms at the broker, so partition 1's next fetch never waits behind one
# held 500 ms; once every record is taken, fetches of both wait 500 ms again. Another
# consumer keeps aiokafka's 500 ms. Caught: the brief wait left out (``_Fetcher`` not
# cutting its requests: the marked consumer's fetch of 0 waited 500).
@pytest.mark.parametrize("marked", [True, False], ids=["group-consumer", "other"])
async def test_a_fetch_sent_while_records_are_held_waits_briefly(
    cluster: FakeCluster, marked: bool
) -> None:
    boot = cluster.bootstrap_servers
    topic = f"fh-{marked}"
    await create_topic(boot, topic, partitions=2)
    producer = AIOKafkaProducer(bootstrap_servers=boot)
    await producer.start()
    try:
        for i in range(50):
            await producer.send(topic, b"v%d" % i, partition=1)
        await producer.flush()
    finally:
        await producer.stop()
    rule = cluster.intercept("Fetch", times=None)  # only records what it sees
    kw: dict[str, Any] = {"key_deserializer": AS_RECORD} if marked else {}
    consumer = AIOKafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False, **kw)
    await consumer.start()
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    try:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        taken = await consumer.getmany(tps[1], timeout_ms=5000, max_records=1)
        assert len(taken[tps[1]]) == 1  # 49 left in the consumer
        brief = SHORT_FETCH_WAIT_MS if marked else 500
        alone = await _seen(rule.bodies, {0}, brief, 0)
        assert all(b["max_wait_time"] == brief for b in rule.bodies if _fetched(b) == {0})
        left = 49
        while left:
            left -= len((await consumer.getmany(tps[1], timeout_ms=5000)).get(tps[1], []))
        await _seen(rule.bodies, {0, 1}, 500, alone + 1)
    finally:
        cluster.remove_fault(rule)
        await consumer.stop()


# The wait is cut per broker: only fetches to a broker whose records are held. Caught:
# every fetch cut while anything is held (node 2's wait became 20 ms).
def test_only_fetches_to_a_broker_with_records_held_are_cut() -> None:
    def fetch(partition: int) -> FetchRequest:
        return FetchRequest(500, 1, 50 << 20, 1, [("t", [(partition, 0, 1 << 20)])])

    requests = [(1, fetch(0)), (2, fetch(1))]
    shorten(requests, {1})
    assert [r._max_wait_ms for _, r in requests] == [SHORT_FETCH_WAIT_MS, 500]
    shorten(requests, set())
    assert [r._max_wait_ms for _, r in requests] == [SHORT_FETCH_WAIT_MS, 500]


# A paused partition taken away (KIP-848's reassign, as a revocation does) is paused no
# more: the next fetches wait the consumer's 500 ms again. Caught: the partitions once
# paused remembered across fetches (a set only ever added to: 20 ms for ever on an idle
# member).
async def test_the_wait_is_restored_when_a_paused_partition_is_reassigned_away(
    cluster: FakeCluster,
) -> None:
    boot = cluster.bootstrap_servers
    await create_topic(boot, "fr", partitions=2)
    rule = cluster.intercept("Fetch", times=None)  # only records what it sees
    consumer = AIOKafkaConsumer(
        bootstrap_servers=boot, enable_auto_commit=False, key_deserializer=AS_RECORD
    )
    await consumer.start()
    tps = [TopicPartition("fr", 0), TopicPartition("fr", 1)]
    try:
        ak.reassign(consumer, set(tps))  # new partitions start paused
        for tp in tps:
            consumer.seek(tp, 0)
        ak.resume(consumer, tps)
        ak.pause(consumer, [tps[1]])
        paused = await _seen(rule.bodies, {0}, SHORT_FETCH_WAIT_MS, 0)
        ak.reassign(consumer, {tps[0]})
        assert not consumer.paused()
        await _seen(rule.bodies, {0}, 500, paused + 1)
    finally:
        cluster.remove_fault(rule)
        await ak.close_consumer(consumer, timeout_s=5.0)


async def _seeded(boot: str, prefix: str) -> None:
    """Topics ``{prefix}-orders``, ``-customers`` and ``-out`` of one partition: 20
    customers' rows, then 2,000 orders over them, all before the join starts."""
    for topic in ("orders", "customers", "out"):
        await create_topic(boot, f"{prefix}-{topic}", partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=boot)
    await producer.start()
    try:
        for i in range(20):
            key = b"c%d" % i
            await producer.send(f"{prefix}-customers", b"row", key=key, timestamp_ms=T0_MS + i)
        for i in range(2000):
            key, t = b"c%d" % (i % 20), T0_MS + 100 + i
            await producer.send(f"{prefix}-orders", b"o%d" % i, key=key, timestamp_ms=t)
        await producer.flush()
    finally:
        await producer.stop()


async def _joined(boot: str, prefix: str, tmp_path: Path, **settings: Any) -> None:
    """Join ``_seeded``'s orders with their customers' rows until every order is
    committed; every order is in ``{prefix}-out`` once, joined."""

    class Join(eosflow.Processor):
        tables: ClassVar[Mapping[str, eosflow.Table]] = {
            "customers": eosflow.Table(f"{prefix}-customers", serde=eosflow.BYTES)
        }

        async def process(self, record: eosflow.Record) -> eosflow.Output:
            row = self.table("customers").get(record.key or b"")
            return eosflow.Output(f"{prefix}-out", (record.value or b"") + b"|" + (row or b""))

    orders, group = f"{prefix}-orders", f"{prefix}-g"
    cfg = state_config(boot, group, orders, f"{prefix}-t", tmp_path, **settings)
    async with eosflow.EosApp(Join(), cfg) as app:
        await until_committed(boot, orders, 1, group, 2000, (app,))
    values = [r.value for r in await read_records(boot, f"{prefix}-out")]
    assert len(values) == 2000 and all(v and v.endswith(b"|row") for v in values)


def _polls_watched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many records each of the session's polls took from the consumer, in order."""
    taken: list[int] = []
    poll = ak.poll

    async def watched(consumer: Any, timeout_s: float, most: int | None) -> Any:
        batch = await poll(consumer, timeout_s, most)
        taken.append(sum(len(records) for records in batch.values()))
        return batch

    monkeypatch.setattr(ak, "poll", watched)
    return taken


# A join over a backlog, its transactions capped at 50 records: after every poll, the
# consumer holds no fetched record back (aiokafka fetches nothing more from a broker
# while it does), and every order is joined once. Caught: the poll asking the consumer
# for at most what may be processed (records left in aiokafka after polls).
async def test_a_poll_with_tables_takes_every_fetched_record(
    cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    boot = cluster.bootstrap_servers
    await _seeded(boot, "fw")
    left: list[int] = []
    poll = TransactSession.poll

    async def watched(self: TransactSession, max_records: int, timeout_s: float) -> Any:
        records = await poll(self, max_records, timeout_s)
        left.append(len(self.consumer._fetcher._records))
        return records

    monkeypatch.setattr(TransactSession, "poll", watched)
    await _joined(boot, "fw", tmp_path, max_records_per_txn=50)
    assert len(left) > 40 and not any(left), left


async def _copied(boot: str, prefix: str, tmp_path: Path) -> None:
    """Copy ``_seeded``'s orders (an app without tables) until every one is committed;
    every order is in ``{prefix}-out`` once."""

    class Copy(eosflow.Processor):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            return eosflow.Output(f"{prefix}-out", record.value)

    orders, group = f"{prefix}-orders", f"{prefix}-g"
    cfg = state_config(boot, group, orders, f"{prefix}-t", tmp_path)
    async with eosflow.EosApp(Copy(), cfg) as app:
        await until_committed(boot, orders, 1, group, 2000, (app,))
    values = [r.value for r in await read_records(boot, f"{prefix}-out")]
    assert sorted(values) == sorted(b"o%d" % i for i in range(2000))


# The share cut to 300 (the default is 5,000), for a join (the sync's polls, which take
# what was fetched) and for a copy (an app without tables, which asks for at most what
# it may process): no poll takes more from the consumer, some take all 300 (the fetch
# held more), and every order is joined, or copied, once. Caught: the share ignored,
# with tables (a poll takes the whole fetch) and without (a poll sized by the
# transaction's room alone).
@pytest.mark.parametrize("tables", [True, False], ids=["join", "copy"])
async def test_a_poll_takes_at_most_its_share(
    cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tables: bool
) -> None:
    boot, prefix = cluster.bootstrap_servers, "fs" if tables else "fc"
    await _seeded(boot, prefix)
    taken = _polls_watched(monkeypatch)
    monkeypatch.setattr(Sync if tables else Unsynced, "takes", 300)
    await (_joined if tables else _copied)(boot, prefix, tmp_path)
    assert max(taken) == 300 and taken.count(300) >= 5, taken
