"""Tables and joins after the regroup (``Seat.tasks``): orders regrouped by product and
priced from a table of products (``examples/regroup_prices.py``), and orders and
payments both regrouped by order id and joined (``examples/regroup_paid.py``) -- each
stage's inputs and tables taken together per partition number, the other topics on
their own."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from kit import T0_MS, create_topic, eventually
from test_pipeline import config, product_of

import eosflow
from eosflow._checks._checker import read_records
from eosflow.testing._ladder import Broker
from examples.regroup_paid import ById, PaidAfterRegroup
from examples.regroup_prices import PricedOrders


def price_of(product: str) -> int:
    return 100 + int(product[1:])


# The orders (3 partitions, placed by hand, not by Kafka's default partitioner) are read
# alone; the repartition topic takes the table's 2 partitions, and partition p of both
# go together. Caught: no tasks (the whole app one co-partitioned group: "table
# 'prices' ... has 2 partitions and input topic ... 3" at start); the sync not grouped
# (orders[2] waited for a prices[2] that does not exist: nothing committed); the
# placement check on every input (the hand-placed orders stopped the app); the
# repartition topic sized by the orders (3 partitions against the table's 2); a table
# not counted as state (no __positions: a stale offset fetched would go unchecked).
async def test_a_table_after_the_regroup_joins_per_new_key_exactly_once(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    src, prices, dst, group = (b.unique(n) for n in ("orders", "prices", "priced", "prices"))
    await create_topic(b.bootstrap_servers, src, 3)
    await create_topic(b.bootstrap_servers, prices, 2)
    await create_topic(b.bootstrap_servers, dst, 2)
    products = sorted({product_of(i) for i in range(13)})
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, acks="all")
    await p.start()
    try:  # every price older than every order: each order sees its product's row
        for product in products:
            row = json.dumps({"price": price_of(product)}).encode()
            await p.send(prices, row, key=product.encode(), timestamp_ms=T0_MS - 60_000)
        n = 600
        for i in range(n):  # each order in partition i % 3, whatever its key
            value = json.dumps({"order": i, "product": product_of(i)}).encode()
            key = f"c{i % 37}".encode()
            await p.send(src, value, key=key, partition=i % 3, timestamp_ms=T0_MS + i)
        await p.flush()
    finally:
        await p.stop()
    cfg = config(b.bootstrap_servers, group, src, b.unique("tx"), tmp_path, max_records_per_txn=100)
    pipeline = PricedOrders(PricedOrders.Settings(orders=src, prices=prices, output=dst))
    app = eosflow.EosApp(pipeline, cfg)

    async def priced() -> bool:
        assert app.failure is None, app.failure
        return len(await read_records(b.bootstrap_servers, dst, committed_only=True)) >= n

    async with app:
        await eventually(priced, timeout_s=60, what="every order priced and committed")
    out = await read_records(b.bootstrap_servers, dst, committed_only=True)
    seen = Counter(tuple(json.loads(r.value or b"null")) for r in out)
    assert seen == Counter((i, price_of(product_of(i))) for i in range(n))
    repartition = f"{group}--by-product--repartition"
    admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([repartition])
        assert len(described["partitions"]) == 2  # the table's count, not the orders'
        changelogs = {t for t in await admin.list_topics() if t.startswith(f"{group}--")}
    finally:
        await admin.close()
    # a table is state: each stream topic keeps position records, the restore's witness
    assert {t for t in changelogs if t.endswith("--changelog")} == {
        f"{group}--{src}--__positions--changelog",
        f"{group}--{repartition}--__positions--changelog",
    }


async def seed_orders_and_payments(
    bootstrap: str, orders: str, payments: str, n: int, order_parts: int = 3, payment_parts: int = 2
) -> None:
    """Orders keyed by customer on ``order_parts`` partitions, payments (of the orders not
    divisible by 4) keyed by payment on ``payment_parts``, both placed by hand; a payment
    0.5 s after its order."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await p.start()
    try:
        for i in range(n):
            t = T0_MS + i * 10
            order = json.dumps({"order": i}).encode()
            key = f"c{i % 37}".encode()
            await p.send(orders, order, key=key, partition=i % order_parts, timestamp_ms=t)
            if i % 4:
                pay = json.dumps({"order": i, "pay": f"pay{i}"}).encode()
                key = f"pay{i}".encode()
                part = i % payment_parts
                await p.send(payments, pay, key=key, partition=part, timestamp_ms=t + 500)
        await p.flush()
    finally:
        await p.stop()


# A stream-stream join after regrouping both sides: the two repartition topics take one
# partition count (the larger default, 3) and partition p of both go together. Caught:
# the sizing of a join of regrouped inputs left out (3 and 2 partitions refused at
# start); a copartitioned stage making no task group (its state_of refused: no group
# holds both sides); state_of not resolving a stage's name ("'payments-by-id' is not an
# input topic": the app stopped).
async def test_a_join_of_two_regrouped_streams_pairs_each_order_once(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    orders, payments, dst, group = (b.unique(n) for n in ("orders", "payments", "paid", "paid"))
    await create_topic(b.bootstrap_servers, orders, 3)
    await create_topic(b.bootstrap_servers, payments, 2)
    await create_topic(b.bootstrap_servers, dst, 2)
    n = 400
    await seed_orders_and_payments(b.bootstrap_servers, orders, payments, n)
    cfg = config(
        b.bootstrap_servers, group, orders, b.unique("tx"), tmp_path, max_records_per_txn=100
    ).model_copy(update={"input_topics": (orders, payments)})
    settings = PaidAfterRegroup.Settings(orders=orders, payments=payments, output=dst)
    app = eosflow.EosApp(PaidAfterRegroup(settings), cfg)
    wanted = Counter((i, f"pay{i}") for i in range(n) if i % 4)

    async def paired() -> bool:
        assert app.failure is None, app.failure
        out = await read_records(b.bootstrap_servers, dst, committed_only=True)
        return len(out) >= len(wanted)

    async with app:
        await eventually(paired, timeout_s=60, what="every paid order paired and committed")
    out = await read_records(b.bootstrap_servers, dst, committed_only=True)
    assert Counter(tuple(json.loads(r.value or b"null")) for r in out) == wanted


class Peeking(ById):
    """A merge of orders and payments that is not co-partitioned, reading its own store
    on the other input's partition of the same number."""

    stores = {"seen": eosflow.JSON}

    def configure(self, config: eosflow.EosConfig) -> None:
        self.inputs = config.input_topics

    async def process(self, record: eosflow.Record) -> eosflow.Regroup:
        other = next(t for t in self.inputs if t != record.topic)
        self.state_of(other, "seen")
        return await super().process(record)


# Only a copartitioned stage reads its other inputs' stores, even where another stage of
# the app is copartitioned (so the app's sync is on). Caught: the check removed (the
# peek read orders' partition 2 with no payments[2] to hold: aborted and redone, for
# ever).
async def test_state_of_from_a_stage_that_is_not_copartitioned_is_refused(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    orders, payments, dst, group = (b.unique(n) for n in ("orders", "payments", "paid", "peek"))
    await create_topic(b.bootstrap_servers, orders, 3)
    await create_topic(b.bootstrap_servers, payments, 2)
    await seed_orders_and_payments(b.bootstrap_servers, orders, payments, 20)
    pipeline = PaidAfterRegroup(
        PaidAfterRegroup.Settings(orders=orders, payments=payments, output=dst)
    )
    peek = eosflow.Stage(Peeking(), inputs=(orders, payments))
    pipeline.stages = {**pipeline.stages, "orders-by-id": peek}
    cfg = config(b.bootstrap_servers, group, orders, b.unique("tx"), tmp_path)
    app = eosflow.EosApp(pipeline, cfg.model_copy(update={"input_topics": (orders, payments)}))

    async def failed() -> bool:
        return app.failure is not None

    refused = "only a copartitioned stage reads its other inputs' stores"
    with pytest.raises(eosflow.ProcessingError, match=refused):
        async with app:  # its exit raises what stopped it
            await eventually(failed, timeout_s=30, what="the app stopped")
