"""Orders keyed by customer, regrouped by product, then priced from a table of products:
a table after the regroup.

    eosflow run examples.regroup_prices:PricedOrders --bootstrap-servers 127.0.0.1:9092 \
        --group-id priced --input-topic orders --transactional-id priced-1

Stage ``by-product`` (``examples/regroup.py``'s) regroups each order of the setting
``orders`` (default ``orders``; value: JSON with ``order`` and ``product``) under its
product. Stage ``priced`` reads the regrouped orders with the table of the setting
``prices`` (default ``prices``; key: a product, value: JSON such as ``{"price": 120}``)
and writes ``[order, price]`` (the price None for a product the table lacks), keyed by
the product, to ``output`` (default ``<orders>-priced``).

The table goes with the stage that declares it: partition p of the repartition topic and
of ``prices`` are read together, rows and orders merged in timestamp order, while the
orders topic is read on its own (its keys may be placed by any partitioner). The
repartition topic takes the table's partition count.
"""

from __future__ import annotations

import json

import eosflow
from examples.regroup import ByProduct


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


class PricedOrders(eosflow.Pipeline):
    class Settings(eosflow.AppSettings):
        orders: str = "orders"  # the input topic
        prices: str = "prices"  # the table topic: product -> {"price": ...}
        output: str | None = None  # the output topic (None: <orders>-priced)

    def __init__(self, settings: Settings | None = None) -> None:
        s = settings or self.Settings()
        self.stages = {
            "by-product": eosflow.Stage(ByProduct(), inputs=(s.orders,)),
            "priced": eosflow.Stage(
                Priced(s.prices, s.output or f"{s.orders}-priced"), inputs=("by-product",)
            ),
        }
