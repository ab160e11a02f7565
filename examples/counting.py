"""A running count per key, exactly once: each record raises its key's count by one and
emits the new count (key: the record's key, value: the count as text).

    eosflow run examples.counting:Count --bootstrap-servers 127.0.0.1:9092 \
        --group-id count --input-topic words --transactional-id count-1

The output topic is the setting ``output`` (``--set output=...`` or
``EOSFLOW_APP_OUTPUT``; default ``<input>-counts``). The counts
live in the store ``counts`` (JSON values), whose changelog topic
``count--words--counts--changelog`` eosflow creates. After any crash, rebalance or
zombie, the count of every key equals the number of its records, and the outputs of
each key are exactly 1, 2, ..., n.
"""

from __future__ import annotations

import eosflow


class Count(eosflow.Processor):
    class Settings(eosflow.AppSettings):
        output: str | None = None  # the output topic (None: <input>-counts)

    stores = {"counts": eosflow.JSON}

    def __init__(self, settings: Settings | None = None) -> None:
        self.output = (settings or self.Settings()).output

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        counts = self.state("counts")
        key = record.key or b""
        n = counts.get(key, 0) + 1
        counts.put(key, n)
        return eosflow.Output(self.output or f"{record.topic}-counts", str(n), key=key)
