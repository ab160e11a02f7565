"""``examples/customers.py``'s join of orders with a table of customers, into
``CHAOS_OUT``, the table topic its setting (``EOSFLOW_APP_CUSTOMERS_TOPIC``), each order
slowed by ``CHAOS_DELAY_S`` (5 ms by default) so chaos lands mid-stream."""

import asyncio
import os

import eosflow
from examples.customers import EnrichOrders


class SlowJoin(EnrichOrders):
    def __init__(self) -> None:
        super().__init__()
        self.delay_s = float(os.environ.get("CHAOS_DELAY_S", "0.005"))

    def configure(self, config: eosflow.EosConfig) -> None:
        self.topic = os.environ["CHAOS_OUT"]

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        await asyncio.sleep(self.delay_s)
        return await super().process(record)
