"""The smallest eosflow processor: copy every record to an output topic.

    eosflow run examples.passthrough:PassThrough \
        --bootstrap-servers 127.0.0.1:9092 --group-id copy --input-topic in \
        --transactional-id copy-1

The output topic comes from ``PASSTHROUGH_OUTPUT`` (default ``<input>-copy``).
"""

from __future__ import annotations

import os

import eosflow


class PassThrough(eosflow.Processor):
    def __init__(self) -> None:
        self.output = os.environ.get("PASSTHROUGH_OUTPUT")

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        topic = self.output or f"{record.topic}-copy"
        return eosflow.Output(topic, record.value, key=record.key, headers=record.headers)
