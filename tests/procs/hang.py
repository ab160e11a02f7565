"""A pass-through that never returns from ``process()`` at offset ``HANG_AT`` (5 unless
set), after creating the file ``HANG_FILE``: a stop waiting for its transaction to
finish waits for ever."""

import asyncio
import os
from pathlib import Path

import eosflow


class Hang(eosflow.Processor):
    def __init__(self) -> None:
        self.out = os.environ["CHAOS_OUT"]
        self.hang_at = int(os.environ.get("HANG_AT", "5"))
        self.marker = Path(os.environ["HANG_FILE"])

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        if record.offset == self.hang_at:
            self.marker.touch()
            await asyncio.Event().wait()
        return eosflow.Output(self.out, record.value, key=record.key)
