"""``examples/regroup.py``'s two stages (orders regrouped by product, counted per
product) with the count slowed to ~1 ms a record (``CHAOS_DELAY_S``), so chaos lands
mid-stream; the topics from ``EOSFLOW_APP_ORDERS`` and ``EOSFLOW_APP_OUTPUT``."""

import asyncio
import os

import eosflow
from examples.regroup import ByProduct, CountPerProduct, ProductCounts


class SlowCountPerProduct(CountPerProduct):
    async def process(self, record: eosflow.Record) -> eosflow.Output:
        await asyncio.sleep(float(os.environ.get("CHAOS_DELAY_S", "0.001")))
        return await super().process(record)


class SlowProductCounts(eosflow.Pipeline):
    def __init__(self) -> None:
        s = ProductCounts.Settings()
        self.stages = {
            "by-product": eosflow.Stage(ByProduct(), inputs=(s.orders,)),
            "count": eosflow.Stage(
                SlowCountPerProduct(s.output or f"{s.orders}-per-product"),
                inputs=("by-product",),
            ),
        }
