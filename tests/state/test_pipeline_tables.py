"""A table after the regroup (``Seat.tasks``): orders keyed by customer, regrouped by
product, then joined with a table of prices keyed by product -- in one app, the
repartition topic and the table taken together per partition number, the source topic
on its own."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from kit import T0_MS, create_topic, eventually
from test_pipeline import by_product_then, config, product_of

import eosflow
from eosflow._checks._checker import read_records
from eosflow.testing._ladder import Broker


def price_of(product: str) -> int:
    return 100 + int(product[1:])


class Priced(eosflow.Processor):
    """Each regrouped order with its product's price, from the table ``prices``."""

    def __init__(self, prices: str, output: str) -> None:
        self.tables = {"prices": eosflow.Table(prices)}
        self.output = output

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        order = json.loads(record.value or b"{}")["order"]
        row = self.table("prices").get(record.key or b"")
        price = None if row is None else row["price"]
        return eosflow.Output(self.output, json.dumps([order, price]), key=record.key)


# The orders (3 partitions, placed by hand, not by Kafka's default partitioner) are read
# alone; the repartition topic takes the table's 2 partitions, and partition p of both
# go together. Caught: no tasks (the whole app one co-partitioned group: "table
# 'prices' ... has 2 partitions and input topic ... 3" at start); the sync not grouped
# (orders[2] waited for a prices[2] that does not exist: nothing committed); the
# placement check on every input (the hand-placed orders stopped the app); the
# repartition topic sized by the orders (3 partitions against the table's 2).
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
    app = eosflow.EosApp(by_product_then(src, Priced(prices, dst)), cfg)

    async def priced() -> bool:
        assert app.failure is None, app.failure
        return len(await read_records(b.bootstrap_servers, dst, committed_only=True)) >= n

    async with app:
        await eventually(priced, timeout_s=60, what="every order priced and committed")
    out = await read_records(b.bootstrap_servers, dst, committed_only=True)
    seen = Counter(tuple(json.loads(r.value or b"null")) for r in out)
    assert seen == Counter((i, price_of(product_of(i))) for i in range(n))
    admin = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([f"{group}--by-product--repartition"])
        assert len(described["partitions"]) == 2  # the table's count, not the orders'
    finally:
        await admin.close()
