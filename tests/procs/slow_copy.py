"""A pass-through processor slowed to ~1 ms a record, so chaos lands mid-stream."""

import asyncio
import os

import eosflow


class SlowCopy(eosflow.Processor):
    def __init__(self) -> None:
        self.out = os.environ["CHAOS_OUT"]

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        await asyncio.sleep(0.001)
        return eosflow.Output(self.out, record.value, key=record.key)
