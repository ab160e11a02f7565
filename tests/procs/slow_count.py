"""The running count of ``examples/counting.py`` into ``CHAOS_OUT``, slowed to ~1 ms a
record (``CHAOS_DELAY_S``), so chaos lands mid-stream."""

import asyncio
import os

import eosflow
from examples.counting import Count


class SlowCount(Count):
    def __init__(self) -> None:
        super().__init__()
        self.output = os.environ["CHAOS_OUT"]
        self.delay_s = float(os.environ.get("CHAOS_DELAY_S", "0.001"))

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        await asyncio.sleep(self.delay_s)
        return await super().process(record)
