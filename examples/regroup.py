"""Orders keyed by customer, counted per product, in one app of two stages.

    eosflow run examples.regroup:ProductCounts --bootstrap-servers 127.0.0.1:9092 \
        --group-id products --input-topic orders --transactional-id products-1

Stage ``by-product`` reads the setting ``orders`` (``--set orders=...`` or
``EOSFLOW_APP_ORDERS``; default ``orders``; key: a customer; value: JSON with a ``product``)
and regroups each order under its product; eosflow creates the repartition topic
``products--by-product--repartition`` (as many partitions as ``orders``). Stage
``count`` reads it, keeps a running count per product in its store ``per-product`` and
emits the new count (key: the product, value: the count as text) to the setting
``output`` (``--set output=...`` or ``EOSFLOW_APP_OUTPUT``; default
``<orders>-per-product``). The regrouped order, the count it raises and every consumed
offset commit in one transaction per instance: after any crash, rebalance or zombie,
each product's outputs are exactly 1, 2, ..., n. ``eosflow topology
examples.regroup:ProductCounts --group-id products`` prints the stages.
"""

from __future__ import annotations

import json

import eosflow


class ByProduct(eosflow.Processor):
    """An order, keyed by its product."""

    async def process(self, record: eosflow.Record) -> eosflow.Regroup:
        product = json.loads(record.value or b"{}")["product"]
        return eosflow.Regroup(key=product, value=record.value)


class CountPerProduct(eosflow.Processor):
    """A running count per product (the key the orders were regrouped by)."""

    stores = {"per-product": eosflow.JSON}

    def __init__(self, output: str) -> None:
        self.output = output

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        counts = self.state("per-product")
        key = record.key or b""
        n = counts.get(key, 0) + 1
        counts.put(key, n)
        return eosflow.Output(self.output, str(n), key=key)


class ProductCounts(eosflow.Pipeline):
    class Settings(eosflow.AppSettings):
        orders: str = "orders"  # the input topic
        output: str | None = None  # the output topic (None: <orders>-per-product)

    def __init__(self, settings: Settings | None = None) -> None:
        s = settings or self.Settings()
        self.stages = {
            "by-product": eosflow.Stage(ByProduct(), inputs=(s.orders,)),
            "count": eosflow.Stage(
                CountPerProduct(s.output or f"{s.orders}-per-product"), inputs=("by-product",)
            ),
        }
