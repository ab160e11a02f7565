"""A PostgreSQL sink slowed to ~1 ms a record inside its database transaction
(``CHAOS_DELAY_S`` to change it), so chaos lands mid-write: each record a row of
``rows(topic, partition, off)`` in ``EOSFLOW_POSTGRES_DSN``, a table without a unique
constraint, so a duplicate would show."""

import asyncio
import os
from collections.abc import Sequence
from typing import Any

import eosflow


class SlowSink(eosflow.PostgresSink):
    def __init__(self) -> None:
        super().__init__()
        self.delay_s = float(os.environ.get("CHAOS_DELAY_S", "0.001"))

    async def write(self, conn: Any, records: Sequence[eosflow.Record]) -> None:
        await conn.copy_records_to_table(
            "rows",
            records=[(r.topic, r.partition, r.offset) for r in records],
            columns=["topic", "partition", "off"],
        )
        await asyncio.sleep(self.delay_s * len(records))  # the rows in, not yet committed
