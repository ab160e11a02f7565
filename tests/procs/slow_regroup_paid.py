"""``examples/regroup_paid.py``'s pipeline (orders and payments regrouped by order id,
then joined) with the join slowed to ~1 ms a record (``CHAOS_DELAY_S``), so chaos lands
mid-stream; the topics from ``EOSFLOW_APP_ORDERS``, ``EOSFLOW_APP_PAYMENTS`` and
``EOSFLOW_APP_OUTPUT``."""

import asyncio
import os

import eosflow
from examples.regroup_paid import PaidAfterRegroup, PaidJoin


class SlowPaidJoin(PaidJoin):
    async def process(self, record: eosflow.Record) -> eosflow.Output | None:
        await asyncio.sleep(float(os.environ.get("CHAOS_DELAY_S", "0.001")))
        return await super().process(record)


class SlowPaid(PaidAfterRegroup):
    def __init__(self) -> None:
        super().__init__()
        paid = self.stages["paid"]  # the example's join stage, its processor slowed
        join = paid.processor
        assert isinstance(join, PaidJoin)
        self.stages = {
            **self.stages,
            "paid": eosflow.Stage(SlowPaidJoin(join.output), inputs=paid.inputs),
        }
