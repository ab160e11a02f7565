"""``examples/regroup_paid.py``'s three stages (orders and payments regrouped by order
id, then joined) with the join slowed to ~1 ms a record (``CHAOS_DELAY_S``), so chaos
lands mid-stream; the topics from ``EOSFLOW_APP_ORDERS``, ``EOSFLOW_APP_PAYMENTS`` and
``EOSFLOW_APP_OUTPUT``."""

import asyncio
import os

import eosflow
from examples.regroup_paid import ById, PaidAfterRegroup, PaidJoin


class SlowPaidJoin(PaidJoin):
    async def process(self, record: eosflow.Record) -> eosflow.Output | None:
        await asyncio.sleep(float(os.environ.get("CHAOS_DELAY_S", "0.001")))
        return await super().process(record)


class SlowPaid(eosflow.Pipeline):
    def __init__(self) -> None:
        s = PaidAfterRegroup.Settings()
        self.stages = {
            "orders-by-id": eosflow.Stage(ById(), inputs=(s.orders,)),
            "payments-by-id": eosflow.Stage(ById(), inputs=(s.payments,)),
            "paid": eosflow.Stage(
                SlowPaidJoin(s.output or f"{s.orders}-paid"),
                inputs=("orders-by-id", "payments-by-id"),
            ),
        }
