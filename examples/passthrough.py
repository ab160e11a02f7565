"""The smallest eosflow processor: copy every record to an output topic.

    eosflow run examples.passthrough:PassThrough \
        --bootstrap-servers 127.0.0.1:9092 --group-id copy --input-topic in \
        --transactional-id copy-1

The output topic is the setting ``output`` (``--set output=...`` or
``EOSFLOW_APP_OUTPUT``; default ``<input>-copy``).
"""

from __future__ import annotations

import eosflow


class PassThrough(eosflow.Processor):
    class Settings(eosflow.AppSettings):
        output: str | None = None  # the output topic (None: <input>-copy)

    def __init__(self, settings: Settings | None = None) -> None:
        self.output = (settings or self.Settings()).output

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        topic = self.output or f"{record.topic}-copy"
        return eosflow.Output(topic, record.value, key=record.key, headers=record.headers)
