"""Tables (``eosflow.Table``): a topic materialised per partition, read by the stream of
the same partition number in timestamp order. The committed outputs of a join must equal
the join computed from both topics' records and timestamps alone, however the consumer
interleaves its fetches, and after a restart whatever the local copy held. The comment
above each test names the mutation that made it fail when the mechanism was taken out."""

from __future__ import annotations

import asyncio
import json
import shutil
import urllib.error
import urllib.request
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from aiokafka import AIOKafkaProducer
from kit import T0_MS, create_topic, eventually, key_in, session_of
from stateful import state_config, until_committed

import eosflow
from eosflow._checks._checker import read_records
from eosflow._protocol import _codes as codes
from eosflow.testing import expected_join
from eosflow.testing._ladder import Broker
from examples import customers


@dataclass(frozen=True)
class Names:
    """A join's topics and group, unique per test (genuine brokers keep state)."""

    orders: str
    customers: str
    out: str
    group: str
    accounts: str  # a second table, empty: a task of three partitions

    @classmethod
    def of(cls, b: Broker) -> Names:
        orders = b.unique("orders")
        customers, accounts = b.unique("customers"), b.unique("accounts")
        return cls(orders, customers, f"{orders}-enriched", b.unique("g"), accounts)


def enrich(n: Names) -> eosflow.Processor:
    """``examples/customers.py`` on this test's table topic, with a second table."""

    class Enrich(customers.EnrichOrders):
        def __init__(self) -> None:
            super().__init__(self.Settings(customers_topic=n.customers))
            self.tables = {**self.tables, "accounts": eosflow.Table(n.accounts)}

    return Enrich()


def history(
    partitions: int, keys: int, versions: int, start_ms: int = T0_MS
) -> tuple[list[Any], list[Any]]:
    """Customer rows and orders racing each other: key k's row version v at
    ``start + v*10 + k`` ms and an order of k 5 ms after each version, so an order
    joined with any row but the one just before it shows. (partition, key, ts, value)."""
    rows, orders = [], []
    for p in range(partitions):
        placed = [key_in(p, partitions, f"c{p}-{k}") for k in range(keys)]
        for v in range(versions):
            for k in range(keys):
                key = placed[k]
                t = start_ms + v * 10 + k
                rows.append((p, key, t, json.dumps({"v": v}).encode()))
                orders.append((p, key, t + 5, json.dumps({"id": f"o-{p}-{k}-{v}"}).encode()))
    return rows, orders


async def produce(
    bootstrap: str, topic: str, events: Sequence[tuple[int, bytes, int, bytes]]
) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await p.start()
    try:
        for n, key, t, value in events:
            await p.send(topic, value, key=key, partition=n, timestamp_ms=t)
        await p.flush()
    finally:
        await p.stop()


async def joined(b: Broker, n: Names) -> dict[str, Any]:
    """Each order id's joined row in the committed output; an order twice fails."""
    out: dict[str, Any] = {}
    for r in await read_records(b.bootstrap_servers, n.out):
        value = json.loads(r.value)
        assert value["id"] not in out, f"order {value['id']} joined twice"
        out[value["id"]] = value["customer"]
    return out


async def check_join(b: Broker, n: Names, count: int) -> dict[str, Any]:
    """The committed output: every order once, joined as the input alone says."""
    positions = await expected_join(b.bootstrap_servers, n.orders, n.customers)
    records = await read_records(b.bootstrap_servers, n.orders)
    ids = {(r.partition, r.offset): json.loads(r.value)["id"] for r in records}
    want = {ids[at]: None if row is None else json.loads(row) for at, row in positions.items()}
    got = await joined(b, n)
    assert len(got) == len(want) == count
    wrong = {o: (got.get(o), want[o]) for o in want if got.get(o) != want[o]}
    assert not wrong, f"{len(wrong)} orders joined another row, e.g. {sorted(wrong.items())[:3]}"
    return got


def config(b: Broker, n: Names, state_dir: Path, txn: str = "tx-1", **kw: Any) -> eosflow.EosConfig:
    return state_config(b.bootstrap_servers, n.group, n.orders, b.unique(txn), state_dir, **kw)


async def topics(b: Broker, n: Names, partitions: int = 2) -> None:
    for t in (n.orders, n.customers, n.out, n.accounts):
        await create_topic(b.bootstrap_servers, t, partitions)


async def seeded(b: Broker, n: Names, keys: int, versions: int) -> list[Any]:
    """The topics (2 partitions) with ``history``'s rows and orders in them: the orders."""
    await topics(b, n)
    rows, orders = history(partitions=2, keys=keys, versions=versions)
    await produce(b.bootstrap_servers, n.customers, rows)
    await produce(b.bootstrap_servers, n.orders, orders)
    return orders


async def run_until(b: Broker, n: Names, app: eosflow.EosApp, partitions: int, count: int) -> None:
    async with app:
        await until_committed(b.bootstrap_servers, n.orders, partitions, n.group, count, (app,))


# Orders and their customers' rows, all in the topics before the app starts: the
# consumer hands over a partition's records in runs, so an order's row may be fetched
# after it. Every order must join the row of its time, and a query of the table answers
# a key's last row (with two tables: from the right one's partitions). Caught: the sync
# taken out (``Stores.sync`` returning the records as polled): orders joined rows of
# other times; a query reading every table's partitions (a 404: no such column family).
async def test_orders_join_the_row_of_their_time_whatever_the_fetch_order(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b, n = eosflow_broker, Names.of(eosflow_broker)
    orders = await seeded(b, n, keys=3, versions=150)
    ops = {"metrics_port": 0, "progress_interval_s": 0}
    app = eosflow.EosApp(enrich(n), config(b, n, tmp_path, ops=ops))
    async with app:
        await until_committed(b.bootstrap_servers, n.orders, 2, n.group, len(orders), (app,))
        # the table's committed row, asked of the operations port
        status, body = await asyncio.to_thread(query, app, "/state/customers/c1-2")
        assert status == 200 and body["values"][0]["value"] == {"v": 149}, body
        assert body["values"][0]["topic"] == n.customers
    await check_join(b, n, len(orders))


def watched(n: Names) -> Any:
    """``enrich(n)`` that says when a record is in its ``process``, and lets other tasks
    run there once a record."""

    base = type(enrich(n))

    class Watched(base):  # type: ignore[valid-type,misc]
        busy = False

        async def process(self, record: eosflow.Record) -> eosflow.Output:
            self.busy = True
            try:
                await asyncio.sleep(0)  # other tasks run inside process() too
                return await super().process(record)
            finally:
                self.busy = False

    return Watched()


# Another task of the app -- started by a hook, so inside the app's run, where the
# processor's seat is seen -- asks for the table whenever it gets to run: it must find
# one only while a record is in process(). A join's record has no frame of its own
# around process() (``Stores._bind``): the engine says no record is in process itself
# (``Stores.idle``), before it lets other tasks run and when its run of records ends.
# Caught: no idle() before the engine's yield, and none when its run ends (the task
# found the last record's table between records).
async def test_table_outside_process_finds_none_while_the_app_runs(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b, n = eosflow_broker, Names.of(eosflow_broker)
    orders = await seeded(b, n, keys=3, versions=150)
    seen = {"inside": 0, "none": 0, "stale": 0}
    watchers: list[asyncio.Task[None]] = []

    class Watching(type(watched(n))):  # type: ignore[misc]
        async def on_start(self) -> None:
            watchers.append(asyncio.create_task(watch(self)))

    async def watch(processor: Any) -> None:
        while True:
            try:
                processor.table("customers")
            except RuntimeError:
                seen["none"] += 1
            else:
                seen["inside" if processor.busy else "stale"] += 1
            await asyncio.sleep(0)

    app = eosflow.EosApp(Watching(), config(b, n, tmp_path))
    async with app:
        try:
            await until_committed(b.bootstrap_servers, n.orders, 2, n.group, len(orders), (app,))
        finally:
            for watcher in watchers:
                watcher.cancel()
    assert len(watchers) == 1
    assert seen["stale"] == 0 and seen["inside"] > 0 and seen["none"] > 0, seen
    await check_join(b, n, len(orders))


def lazy(n: Names) -> Any:
    """``enrich(n)`` whose outputs are a generator that reads the table when the engine
    takes the outputs: after ``process`` returned."""

    class Lazy(type(enrich(n))):  # type: ignore[misc]
        async def process(self, record: eosflow.Record) -> Any:
            key = record.key or b""
            return (  # the table is asked for as the generator is read
                eosflow.Output(self.topic, json.dumps(self.table("customers").get(key)), key=key)
                for _ in range(1)
            )

    return Lazy()


# A result read lazily is read outside process(): the table it asks for there is
# refused as everywhere else outside it, one line naming the record. Caught: the engine
# taking a result other than an Output without idle first (the generator read the row).
async def test_a_lazy_result_reads_no_table_after_process(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b, n = eosflow_broker, Names.of(eosflow_broker)
    orders = await seeded(b, n, keys=1, versions=2)
    app = eosflow.EosApp(lazy(n), config(b, n, tmp_path))
    with pytest.raises(eosflow.ProcessingError, match="gives the table of the record"):
        async with app:
            await until_committed(b.bootstrap_servers, n.orders, 2, n.group, len(orders), (app,))


def query(app: eosflow.EosApp, path: str) -> tuple[int, Any]:
    assert app.ops.port is not None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{app.ops.port}{path}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# A restart between two halves of the orders: before the second instance starts, the
# table topic gets a row per key from after every order, so a table restored past the
# group's committed offset shows it to the pending orders (each should join the last
# row before the restart). With the local copy kept (at the committed offset) and wiped
# (rebuilt from the topic). Caught: the restore applying records at or past the
# committed offset (the pending orders joined the later rows).
@pytest.mark.parametrize("wipe", [False, True], ids=["kept", "wiped"])
async def test_a_restart_restores_the_table_at_the_committed_offset(
    eosflow_broker: Broker, tmp_path: Path, wipe: bool
) -> None:
    b, n = eosflow_broker, Names.of(eosflow_broker)
    await topics(b, n)
    rows, orders = history(partitions=2, keys=3, versions=60)
    first = [o for o in orders if o[2] < T0_MS + 300]
    await produce(b.bootstrap_servers, n.customers, [r for r in rows if r[2] < T0_MS + 300])
    await produce(b.bootstrap_servers, n.orders, first)
    cfg = config(b, n, tmp_path)
    await run_until(b, n, eosflow.EosApp(enrich(n), cfg), 2, len(first))
    later = [(p, key, T0_MS + 10_000, b'{"v": "later"}') for p, key, _t, _v in rows[:6]]
    await produce(b.bootstrap_servers, n.customers, later)
    await produce(b.bootstrap_servers, n.orders, [o for o in orders if o[2] >= T0_MS + 300])
    if wipe:
        shutil.rmtree(tmp_path / n.group)
    await run_until(b, n, eosflow.EosApp(enrich(n), cfg), 2, len(orders))
    got = await check_join(b, n, len(orders))
    assert {json.dumps(got[o]) for o in got if o.endswith("-59")} == {'{"v": 29}'}


# A produce failure makes the session recover: every held partition restores again, a
# table with nothing to read (at its committed offset) at once. The join goes on, as
# the input says. Caught: the table restore telling "ready" from within its add (the
# recovery then held the table partitions back for good: the orders stalled).
async def test_the_join_goes_on_after_a_recovery(eosflow_broker: Broker, tmp_path: Path) -> None:
    b, n = eosflow_broker, Names.of(eosflow_broker)
    c = b.require_fake("a produce failure on cue")
    orders = await seeded(b, n, keys=3, versions=60)
    cfg = config(b, n, tmp_path)
    error = codes.UNKNOWN_SERVER_ERROR
    rule = c.intercept("Produce", error=error, transactional_id=cfg.transactional_id)
    app = eosflow.EosApp(enrich(n), cfg)
    async with app:
        await until_committed(b.bootstrap_servers, n.orders, 2, n.group, len(orders), (app,))
    assert rule.hits == 1 and app.stats.recovered >= 1, app.stats
    await check_join(b, n, len(orders))


# A table topic with another partition count than the input cannot be co-partitioned:
# one line at start, naming both. Caught: check_partitions not called (the app ran).
async def test_a_table_with_another_partition_count_is_one_line(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b, n = eosflow_broker, Names.of(eosflow_broker)
    await create_topic(b.bootstrap_servers, n.orders, 2)
    await create_topic(b.bootstrap_servers, n.customers, 3)
    await create_topic(b.bootstrap_servers, n.accounts, 2)
    app = eosflow.EosApp(enrich(n), config(b, n, tmp_path))
    with pytest.raises(eosflow.ConfigError) as err:
        await asyncio.wait_for(app.run(), 60)
    assert n.customers in str(err.value) and "3 partitions" in str(err.value)
    assert "\n" not in str(err.value)


# A table topic produced with librdkafka's default partitioner (consistent_random: CRC32
# of the key) holds keys in other partitions than the orders' (murmur2): partition p of
# both is read together, so orders would silently miss their rows (issue 51.6). The app
# stops at the first misplaced row it reads, with one line naming the topic, the
# partition, the offset and the partitioner to use. Caught: Sync.admit without the
# placement check (the app ran on and joined nothing).
async def test_a_table_keyed_by_another_partitioner_stops_with_one_line(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b, n = eosflow_broker, Names.of(eosflow_broker)
    await topics(b, n)
    by_crc32 = [
        (zlib.crc32(k) % 2, k, T0_MS + i, b'{"v": 0}')
        for i, k in enumerate(f"c{i}".encode() for i in range(20))
    ]
    misplaced = [e for e in by_crc32 if key_in(e[0], 2, e[1].decode()) != e[1]]
    assert misplaced  # CRC32 and murmur2 disagree on some of these keys
    await produce(b.bootstrap_servers, n.customers, by_crc32)
    app = eosflow.EosApp(enrich(n), config(b, n, tmp_path))
    with pytest.raises(eosflow.FatalError) as err:
        await asyncio.wait_for(app.run(), 60)
    said = str(err.value)
    assert f"{n.customers}[" in said and "murmur2_random" in said and "offset" in said, said
    assert "\n" not in said
    assert app.stats.committed == 0


class TwoTables(eosflow.Processor):
    tables: ClassVar[Mapping[str, eosflow.Table]] = {
        "a": eosflow.Table("t"),
        "b": eosflow.Table("t"),
    }


class TableIsInput(eosflow.Processor):
    tables: ClassVar[Mapping[str, eosflow.Table]] = {"orders": eosflow.Table("in")}


class TableAndStore(eosflow.Processor):
    stores: ClassVar[Mapping[str, eosflow.Serde | None]] = {"customers": eosflow.JSON}
    tables: ClassVar[Mapping[str, eosflow.Table]] = {"customers": eosflow.Table("customers")}


class BatchWithTable(eosflow.Processor):
    tables: ClassVar[Mapping[str, eosflow.Table]] = {"customers": eosflow.Table("customers")}

    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        return []


@pytest.mark.parametrize(
    ("processor", "words"),
    [
        (TwoTables(), "both read topic 't'"),
        (TableIsInput(), "is an input topic too"),
        (TableAndStore(), "names both a table and a store"),
        (BatchWithTable(), "overrides process_batch"),
    ],
    ids=["two-tables-one-topic", "table-is-input", "table-and-store", "batch"],
)
async def test_tables_that_cannot_work_are_one_line(
    tmp_path: Path, processor: eosflow.Processor, words: str
) -> None:
    cfg = state_config("127.0.0.1:1", "g", "in", "tx-1", tmp_path)
    with pytest.raises(eosflow.ConfigError) as err:
        await asyncio.wait_for(eosflow.EosApp(processor, cfg).run(), 60)
    assert words in str(err.value) and "\n" not in str(err.value)


def held(app: eosflow.EosApp, n: Names) -> dict[str, set[int]]:
    s = session_of(app)
    ready = set() if s is None else s._pos.ready
    return {t: {tp.partition for tp in ready if tp.topic == t} for t in (n.orders, n.customers)}


# Two instances share 3 partitions: each must hold partition p of the orders and of the
# table together, under either group protocol ("auto": the consumer protocol where the
# broker has it), and the join is the input's. Caught: the classic protocol's round
# robin kept (an instance held orders without their table partitions), the consumer
# protocol's default (uniform) assignor kept (an instance never held both).
@pytest.mark.parametrize("protocol", ["classic", "auto"])
async def test_two_instances_hold_the_table_partitions_of_their_orders(
    eosflow_broker: Broker, tmp_path: Path, protocol: str
) -> None:
    b, n = eosflow_broker, Names.of(eosflow_broker)
    await topics(b, n, partitions=3)  # round robin would split partition numbers
    rows, orders = history(partitions=3, keys=2, versions=40)
    await produce(b.bootstrap_servers, n.customers, rows)
    await produce(b.bootstrap_servers, n.orders, orders)
    apps = [
        eosflow.EosApp(
            enrich(n), config(b, n, tmp_path / f"i{i}", f"tx-{i}", group_protocol=protocol)
        )
        for i in range(2)
    ]
    async with apps[0], apps[1]:

        async def split() -> bool:
            # settled: under the consumer protocol a partition comes once its previous
            # owner gave it up, so for a moment an instance may hold orders[p] while
            # customers[p] is still the other's (its orders wait in the sync meanwhile)
            both = [held(a, n) for a in apps]
            for app in apps:
                assert app.failure is None, app.failure
            return all(h[n.orders] and h[n.orders] == h[n.customers] for h in both) and not (
                both[0][n.orders] & both[1][n.orders]
            )

        await eventually(split, timeout_s=60, what="each instance holding p of both topics")
        await until_committed(b.bootstrap_servers, n.orders, 3, n.group, len(orders), tuple(apps))
    await check_join(b, n, len(orders))
