"""A pass-through processor slowed to ~1 ms a record (``CHAOS_DELAY_S`` to change it),
so chaos lands mid-stream."""

import asyncio
import os

import eosflow


class SlowCopy(eosflow.Processor):
    def __init__(self) -> None:
        self.out = os.environ["CHAOS_OUT"]
        self.delay_s = float(os.environ.get("CHAOS_DELAY_S", "0.001"))

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        await asyncio.sleep(self.delay_s)
        return eosflow.Output(self.out, record.value, key=record.key)
