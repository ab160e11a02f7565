"""Pipelines end to end (``eosflow/_stages``): orders keyed by customer regrouped by
product and counted per product in one app (``examples/regroup.py``), on the test
cluster -- in process, and as three ``eosflow run`` instances under SIGKILLs, restarts
and a zombie. Each product's outputs must be exactly 1, 2, ..., n, n its number of
orders: a regrouped order duplicated (its offset committed apart from it) or lost shows
as a gap or a repeat; a count of a regrouped record not committed shows as a repeat."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from fleet import Fleet, chaos_env, run_chaos
from kit import T0_MS, broker_has_kip360, create_topic, eventually, log_seen

import eosflow
from eosflow._checks._checker import read_records
from eosflow._protocol import codes
from eosflow.testing import FakeCluster, FaultRule
from eosflow.testing._ladder import Broker
from examples.regroup import ByProduct, CountPerProduct, ProductCounts

CUSTOMERS, PRODUCTS = 37, 13


def product_of(i: int) -> str:
    return f"p{(i * 7) % PRODUCTS:02d}"


async def seed_orders(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    """Orders ``start`` to ``start + n``; order i: key its customer, value JSON naming
    its product, timestamp T0 + i ms."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await p.start()
    try:
        futs = [
            await p.send(
                topic,
                json.dumps({"order": i, "product": product_of(i)}).encode(),
                key=f"c{i % CUSTOMERS}".encode(),
                timestamp_ms=T0_MS + i,
            )
            for i in range(start, start + n)
        ]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def counts_ok(bootstrap: str, dst: str, n: int) -> None:
    """Every product's outputs, in the order committed, are exactly 1..its orders."""
    outputs = await read_records(bootstrap, dst, committed_only=True)
    seen: dict[bytes, list[int]] = defaultdict(list)
    for r in sorted(outputs, key=lambda r: (r.partition, r.offset)):
        assert r.key is not None and r.value is not None
        seen[r.key].append(int(r.value))
    wanted = Counter(product_of(i).encode() for i in range(n))
    assert set(seen) == set(wanted)
    for product, counts in seen.items():
        assert counts == list(range(1, wanted[product] + 1)), (
            f"{product!r}: {len(counts)} outputs for {wanted[product]} orders, first "
            f"departure at {next(i for i, c in enumerate(counts) if c != i + 1)}"
            if counts != list(range(1, len(counts) + 1))
            else f"{product!r}: {len(counts)} outputs for {wanted[product]} orders"
        )


async def committed_outputs(bootstrap: str, dst: str) -> int:
    return len(await read_records(bootstrap, dst, committed_only=True))


def by_product_then(orders: str, then: eosflow.Processor) -> eosflow.Pipeline:
    """Orders regrouped by product (``examples/regroup.py``'s first stage), then ``then``."""

    class ByProductThen(eosflow.Pipeline):
        pass

    pipeline = ByProductThen()
    pipeline.stages = {
        "by-product": eosflow.Stage(ByProduct(), inputs=(orders,)),
        "then": eosflow.Stage(then, inputs=("by-product",)),
    }
    return pipeline


def config(
    bootstrap: str, group: str, src: str, tx: str, state_dir: Path, **kw: Any
) -> eosflow.EosConfig:
    return eosflow.EosConfig(
        bootstrap_servers=bootstrap,
        group_id=group,
        input_topics=(src,),
        transactional_id=tx,
        state_dir=str(state_dir),
        **kw,
    )


async def until_outputs(app: eosflow.EosApp, bootstrap: str, dst: str, n: int, what: str) -> None:
    """Wait, while ``app`` runs, until ``dst`` holds ``n`` committed records."""

    async def done() -> bool:
        assert app.failure is None, app.failure
        return await committed_outputs(bootstrap, dst) >= n

    await eventually(done, timeout_s=90, what=what)


class CountAtOrderTime(CountPerProduct):
    """The count, stamped with the record's time: the order's, if the regroup kept it."""

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        out = await super().process(record)
        return eosflow.Output(out.topic, out.value, key=out.key, timestamp=record.timestamp)


async def log_starts_and_committed(
    bootstrap: str, topic: str, partitions: int, group: str
) -> tuple[list[int], list[int]]:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        starts = await c.beginning_offsets(tps)
        return [starts[tp] for tp in tps], [await c.committed(tp) or 0 for tp in tps]
    finally:
        await c.stop()


# Caught: the repartition topic created with one partition whatever its input has
# (its log starts asserted per partition); Regroup's output without the record's
# timestamp, or Output.timestamp not produced (the outputs' times asserted); the
# trimmer not started after commits (the log starts stayed 0); the stores kept on every
# consumed topic (a changelog of the count's store on the orders too).
async def test_orders_regrouped_by_product_are_counted_exactly_once(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    src, dst, group = b.unique("orders"), b.unique("per-product"), b.unique("products")
    await create_topic(b.bootstrap_servers, src, 3)
    await create_topic(b.bootstrap_servers, dst, 2)
    n = 600
    await seed_orders(b.bootstrap_servers, src, n)
    cfg = config(b.bootstrap_servers, group, src, b.unique("tx"), tmp_path)
    app = eosflow.EosApp(by_product_then(src, CountAtOrderTime(dst)), cfg)
    async with app:
        await until_outputs(app, b.bootstrap_servers, dst, n, "every order counted and committed")
    await counts_ok(b.bootstrap_servers, dst, n)
    outputs = await read_records(b.bootstrap_servers, dst, committed_only=True)
    assert sorted(r.timestamp for r in outputs) == [T0_MS + i for i in range(n)]
    # every regrouped order was committed past, and deleted: the log starts there
    topic = f"{group}--by-product--repartition"
    starts, committed = await log_starts_and_committed(b.bootstrap_servers, topic, 3, group)
    assert sum(committed) == n and all(committed)  # 3 partitions, each read
    assert starts == committed
    # the count's store is kept where its stage reads, by the new key; the orders, whose
    # stage keeps no state, keep the position records alone (the restore's witness)
    admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
    await admin.start()
    try:
        changelogs = {t for t in await admin.list_topics() if t.endswith("--changelog")}
    finally:
        await admin.close()
    assert {t for t in changelogs if t.startswith(f"{group}--")} == {
        f"{group}--{topic}--per-product--changelog",
        f"{group}--{src}--__positions--changelog",
    }


RECORDS, IN_PARTS, INSTANCES = 20_000, 4, 3


async def test_regrouped_counts_exactly_once_under_kills_restarts_and_a_zombie(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    rng = random.Random(20261202)
    src, dst, group = b.unique("rchaos-in"), b.unique("rchaos-out"), b.unique("rchaos-g")
    await create_topic(b.bootstrap_servers, src, IN_PARTS)
    await create_topic(b.bootstrap_servers, dst, 3)
    await seed_orders(b.bootstrap_servers, src, RECORDS)
    session_s = max(b.min_session_timeout_s, 2.0)
    env = chaos_env(session_s) | {
        "EOSFLOW_STATE_DIR": str(tmp_path),
        "EOSFLOW_APP_ORDERS": src,
        "EOSFLOW_APP_OUTPUT": dst,
    }
    fleet = Fleet(
        b.bootstrap_servers,
        src,
        dst,
        group,
        b.unique("rchaos"),
        env,
        target="slow_regroup:SlowProductCounts",
        restart_fenced=not await broker_has_kip360(b.bootstrap_servers),
        log_dir=tmp_path,
    )

    async def settle(fleet: Fleet) -> None:  # the regrouped orders are counted too
        deadline = time.monotonic() + 120
        while await committed_outputs(b.bootstrap_servers, dst) < RECORDS:
            assert time.monotonic() < deadline, "the regrouped orders were not all counted"
            await asyncio.sleep(0.5)

    async def check(fleet: Fleet) -> None:
        await counts_ok(b.bootstrap_servers, dst, RECORDS)

    await run_chaos(fleet, rng, INSTANCES, session_s, IN_PARTS, RECORDS, check, settle)


# An existing repartition topic eosflow cannot use stops the start in one line: another
# partition count, a retention that deletes by age, the broker's own timestamps. Caught:
# the partition count not compared (the app regrouped into 1 partition where the stage
# asked for 3); _check describing cleanup.policy alone (it started on both configs).
@pytest.mark.parametrize(
    ("partitions", "configs", "said"),
    [
        (1, {}, "has 1 partitions, but stage by-product wants 3: set the stage's partitions"),
        (
            3,
            {"retention.ms": "86400000"},
            "has retention.ms=86400000, not -1: records a stage has not read yet would be "
            "deleted by age",
        ),
        (
            3,
            {"retention.ms": "-1", "message.timestamp.type": "LogAppendTime"},
            "has message.timestamp.type=LogAppendTime, not CreateTime: the broker would stamp",
        ),
    ],
    ids=["partitions", "retention", "timestamps"],
)
async def test_a_repartition_topic_eosflow_cannot_use_stops_the_start(
    eosflow_broker: Broker, tmp_path: Path, partitions: int, configs: dict[str, str], said: str
) -> None:
    b = eosflow_broker
    src, dst, group = b.unique("orders"), b.unique("per-product"), b.unique("products")
    await create_topic(b.bootstrap_servers, src, 3)
    topic = f"{group}--by-product--repartition"
    await create_topic(b.bootstrap_servers, topic, partitions, configs=configs)
    cfg = config(b.bootstrap_servers, group, src, b.unique("tx"), tmp_path, retry_timeout_s=5)
    app = eosflow.EosApp(ProductCounts(ProductCounts.Settings(orders=src, output=dst)), cfg)
    try:
        await asyncio.wait_for(app.run(), 60)
    except eosflow.ConfigError as exc:
        message = str(exc)
    else:
        raise AssertionError(f"the app started on the repartition topic ({configs})")
    assert message.startswith(f"repartition topic {topic} {said}"), message
    assert message.endswith("or delete the topic (its records not yet read are lost then)")
    assert "\n" not in message


class CountFailingOnce(CountPerProduct):
    """The count, whose transaction fails once (``TransactionError``: aborted, retried)
    at the ``fail_at``-th regrouped record it sees: by then its transaction consumed
    regrouped records that an earlier commit did not cover."""

    def __init__(self, output: str, fail_at: int) -> None:
        super().__init__(output)
        self.seen, self.fail_at = 0, fail_at

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        self.seen += 1
        if self.seen == self.fail_at:
            raise eosflow.TransactionError("once, mid-transaction")
        return await super().process(record)


# Caught: the trimmer told the offsets before the commit (an aborted transaction's
# regrouped records deleted: the retry found them gone and orders went uncounted); the
# group consumer reading read_uncommitted (the aborted regrouped records written
# beforehand were counted).
async def test_a_stage_reads_only_committed_regrouped_records_and_none_is_trimmed_early(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    src, dst, group = b.unique("orders"), b.unique("per-product"), b.unique("products")
    repartition = f"{group}--by-product--repartition"
    for topic in (src, dst):
        await create_topic(b.bootstrap_servers, topic, 3)
    # as eosflow makes it: nothing deleted by age
    await create_topic(b.bootstrap_servers, repartition, 3, configs={"retention.ms": "-1"})
    # a crashed instance's regrouped orders, aborted: never to be counted
    zombie = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, transactional_id=b.unique("z"))
    await zombie.start()
    try:
        await zombie.begin_transaction()
        for i in range(60):
            await zombie.send(repartition, b'{"aborted": true}', key=product_of(i).encode())
        await zombie.abort_transaction()
    finally:
        await zombie.stop()
    n = 900
    await seed_orders(b.bootstrap_servers, src, n)
    # serial (process_ahead off): the failure must abort a transaction that regrouped
    # records -- met in work done ahead, it would only drop that work
    cfg = config(
        b.bootstrap_servers,
        group,
        src,
        b.unique("tx"),
        tmp_path,
        max_records_per_txn=200,
        process_ahead=False,
    )
    app = eosflow.EosApp(by_product_then(src, CountFailingOnce(dst, fail_at=450)), cfg)
    async with app:
        await until_outputs(app, b.bootstrap_servers, dst, n, "every order counted and committed")
        assert app.stats.aborted >= 1  # the failing transaction was aborted, then retried
    await counts_ok(b.bootstrap_servers, dst, n)


class Unsettled(eosflow.Observer):
    """The partitions of the transactions that did not commit; ``arm`` called once a
    transaction that read a repartition topic committed (on the app's loop, so nothing
    commits between)."""

    def __init__(self, arm: Callable[[], object]) -> None:
        self.partitions: set[tuple[str, int]] = set()
        self._arm: Callable[[], object] | None = arm

    def transaction_ended(self, report: eosflow.TransactionReport) -> None:
        if report.outcome is not eosflow.Outcome.COMMITTED:
            self.partitions.update(report.partitions)
        elif self._arm is not None and any(
            t.endswith("--repartition") for t, _ in report.partitions
        ):
            self._arm()
            self._arm = None


# Two transactions whose offsets the broker refused (aborted, rewound) after the counting
# stage read regrouped records: those records must still be there for the retry.
# Caught: the records a transaction consumed deleted before its EndTxn (orders went
# uncounted).
async def test_a_transaction_that_does_not_commit_leaves_its_regrouped_records(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    c = cluster
    src, dst, group = "orders", "per-product", "products"
    for topic in (src, dst):
        await create_topic(c.bootstrap_servers, topic, 3)
    n = 900
    await seed_orders(c.bootstrap_servers, src, n)
    cfg = config(c.bootstrap_servers, group, src, "tx", tmp_path, max_records_per_txn=100)
    lost: list[FaultRule] = []

    def arm() -> None:  # the next two transactions' offsets refused
        lost.append(c.intercept("TxnOffsetCommit", error=codes.OFFSET_METADATA_TOO_LARGE, times=2))

    unsettled = Unsettled(arm)
    app = eosflow.EosApp(
        ProductCounts(ProductCounts.Settings(orders=src, output=dst)), cfg, observers=[unsettled]
    )
    async with app:
        await until_outputs(app, c.bootstrap_servers, dst, n, "every order counted and committed")
    assert len(lost) == 1 and lost[0].hits == 2 and app.stats.aborted >= 2
    # a transaction that did not commit had read regrouped records
    assert any(t.endswith("--repartition") for t, _ in unsettled.partitions), unsettled.partitions
    await counts_ok(c.bootstrap_servers, dst, n)


class PerMinute(eosflow.Processor):
    """Orders per product (the regrouped key) per minute of event time, each final once."""

    windows = {"product-minutes": eosflow.Tumbling(size_s=60, grace_s=0)}

    def __init__(self, output: str) -> None:
        self.output = output

    async def process(self, record: eosflow.Record) -> None:
        self.window("product-minutes").update(record.key or b"", lambda n: n + 1, 0)

    async def closed(self, key: bytes, window: eosflow.Window, value: int) -> eosflow.Output:
        minute = (window.start_ms - T0_MS) // 60_000
        return eosflow.Output(self.output, json.dumps([minute, value]), key=key)


# A window after the regroup: its event time is the orders' (carried by the regroup),
# its key the product, and its finals reach the stage that declared it. Caught: the
# regroup without the record's timestamp (no minute closed: stream time was the
# producer's clock, one minute); `closed` not routed to the window's stage (none emitted).
async def test_a_window_after_the_regroup_counts_per_new_key_in_event_time(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    src, dst, group = b.unique("orders"), b.unique("minutes"), b.unique("minutes")
    await create_topic(b.bootstrap_servers, src, 1)
    await create_topic(b.bootstrap_servers, dst, 1)
    n = 300  # one a second: five minutes of event time, minutes 0-3 closed by the last
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, acks="all")
    await p.start()
    try:
        for i in range(n):
            value = json.dumps({"order": i, "product": f"p{i % 3}"}).encode()
            await p.send(src, value, key=f"c{i % 7}".encode(), timestamp_ms=T0_MS + i * 1000)
        await p.flush()
    finally:
        await p.stop()
    cfg = config(b.bootstrap_servers, group, src, b.unique("tx"), tmp_path)
    app = eosflow.EosApp(by_product_then(src, PerMinute(dst)), cfg)
    async with app:
        await until_outputs(
            app, b.bootstrap_servers, dst, 12, "minutes 0-3 of every product closed"
        )
    finals = sorted(
        (r.key, *json.loads(r.value or b"null"))
        for r in await read_records(b.bootstrap_servers, dst, committed_only=True)
    )
    assert finals == [(f"p{k}".encode(), m, 20) for k in range(3) for m in range(4)]


class LastOrderAlarm(eosflow.Processor):
    """Per product (the regrouped key): an event-time timer 30 s after its latest order,
    firing its last order's number -- once no order of the product came for 30 s."""

    async def process(self, record: eosflow.Record) -> None:
        order = json.loads(record.value or b"{}")["order"]
        self.timers.at(record.timestamp + 30_000, record.key or b"", str(order))

    async def fire(self, timer: eosflow.Timer) -> eosflow.Output:
        return eosflow.Output(self.output, timer.payload, key=timer.key)

    def __init__(self, output: str) -> None:
        self.output = output


# A timer in the stage after the regroup: set per product in the orders' event time,
# fired through the stage that set it. Caught: `fire` not routed to the stage (no alarm).
async def test_a_timer_after_the_regroup_fires_per_new_key_in_event_time(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    src, dst, group = b.unique("orders"), b.unique("alarms"), b.unique("alarms")
    await create_topic(b.bootstrap_servers, src, 1)
    await create_topic(b.bootstrap_servers, dst, 1)
    # p0 orders every second for 100 s; p1 twice, at 0 s and 10 s: p1's alarm is due at
    # 40 s, p0's never (its next order always comes within 30 s)
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, acks="all")
    await p.start()
    try:
        for i in range(100):
            for product in ("p0", "p1") if i in (0, 10) else ("p0",):
                value = json.dumps({"order": i, "product": product}).encode()
                await p.send(src, value, key=b"c", timestamp_ms=T0_MS + i * 1000)
        await p.flush()
    finally:
        await p.stop()
    cfg = config(b.bootstrap_servers, group, src, b.unique("tx"), tmp_path)
    app = eosflow.EosApp(by_product_then(src, LastOrderAlarm(dst)), cfg)
    async with app:
        await until_outputs(app, b.bootstrap_servers, dst, 1, "p1's alarm fired")

        async def all_read() -> bool:  # 102 orders, then 102 regrouped ones
            return app.stats.records >= 204

        await eventually(all_read, timeout_s=30, what="every order read in both stages")
    alarms = await read_records(b.bootstrap_servers, dst, committed_only=True)
    assert [(r.key, r.value) for r in alarms] == [(b"p1", b"10")]


# A stage reaches only the stores it declares: one naming another stage's store fails
# its record in one line (here the app stops: no dead-letter topic). Caught: the check
# removed (the second stage read and wrote the first stage's store unnoticed).
async def test_a_stage_naming_another_stages_store_is_refused(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    c.create_topic("orders", 1)
    c.create_topic("out", 1)
    await seed_orders(c.bootstrap_servers, "orders", 3)

    class Remembering(ByProduct):
        stores = {"seen": eosflow.JSON}

        async def process(self, record: eosflow.Record) -> Any:
            self.state("seen").put(record.key or b"", 1)
            return await super().process(record)

    class Snooping(eosflow.Processor):
        stores = {"mine": eosflow.JSON}

        async def process(self, record: eosflow.Record) -> eosflow.Output:
            self.state("seen").put(record.key or b"", 2)
            return eosflow.Output("out", b"x", key=record.key)

    class App(eosflow.Pipeline):
        stages = {
            "first": eosflow.Stage(Remembering(), inputs=("orders",)),
            "second": eosflow.Stage(Snooping(), inputs=("first",)),
        }

    app = eosflow.EosApp(App(), config(c.bootstrap_servers, "g", "orders", "tx", tmp_path))
    with pytest.raises(eosflow.EosflowError) as failed:
        await asyncio.wait_for(app.run(), 60)
    assert "no store 'seen' in Snooping.stores ['mine']: a stage reaches only what it" in str(
        failed.value
    )


# The stateless stage's partitions are checked on assignment too: a stable offset fetch
# answered from a stale cache (the test cluster's ``stale_offsets``, as genuine 4.4.0's
# group coordinator answered once it ran again after a SIGSTOP) is fetched again, through
# the orders' witness store, rather than having its orders regrouped and counted twice.
# Caught: no witness (``Staged._witness`` returning at once): products counted twice.
async def test_a_stale_offset_of_a_stateless_stage_is_fetched_again(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    c.create_topic("orders", 1)
    c.create_topic("out", 1)
    await seed_orders(c.bootstrap_servers, "orders", 300)
    first = eosflow.EosApp(
        by_product_then("orders", CountPerProduct("out")),
        config(c.bootstrap_servers, "g", "orders", "tx-1", tmp_path / "a"),
    )
    async with first:
        await until_outputs(first, c.bootstrap_servers, "out", 300, "300 counted")
        c.stale_offsets("g", 4)  # the next fetches answer these offsets
        await seed_orders(c.bootstrap_servers, "orders", 100, start=300)
        await until_outputs(first, c.bootstrap_servers, "out", 400, "400 counted")
    second = eosflow.EosApp(
        by_product_then("orders", CountPerProduct("out")),
        config(c.bootstrap_servers, "g", "orders", "tx-2", tmp_path / "b"),
    )
    witness = "store '__positions' of orders[0] reflects input up to offset 400"
    with log_seen("eosflow.state", witness) as refetched:
        async with second:
            await seed_orders(c.bootstrap_servers, "orders", 50, start=400)
            await until_outputs(second, c.bootstrap_servers, "out", 450, "450 counted")
    await counts_ok(c.bootstrap_servers, "out", 450)
    assert refetched.is_set()
