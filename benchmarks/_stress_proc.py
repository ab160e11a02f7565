"""The pass-through processor ``stress_rebalance`` runs under ``eosflow run`` (kept apart
from the driver so that each instance imports only eosflow)."""

from __future__ import annotations

import asyncio
import os

import eosflow


class PassThrough(eosflow.Processor):
    """Copies key and value to ``STRESS_OUT``; ``STRESS_DELAY_MS`` > 0 sleeps that long per
    record (a stand-in for per-record work, off by default)."""

    def __init__(self) -> None:
        self.out = os.environ["STRESS_OUT"]
        self.delay_s = float(os.environ.get("STRESS_DELAY_MS", "0")) / 1000

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        if self.delay_s > 0:
            await asyncio.sleep(self.delay_s)
        return eosflow.Output(self.out, record.value, key=record.key)
