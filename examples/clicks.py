"""Clicks per user per 5 minutes, each window's count emitted once, when it closes.

The record's key is the user; its Kafka timestamp is when the click happened. A window
closes once the partition's stream time (the latest click time seen there) passes its
end plus the grace; its final count is then emitted (key: the user, value: JSON
``{"start_ms": ..., "end_ms": ..., "value": count}``), in the same transaction as the
window's deletion from the store, so every final is emitted exactly once across crashes,
rebalances and zombies. Clicks arriving after their window closed are late: counted in
``eosflow_late_records_total``, or dead-lettered when a dead-letter topic is set.

    eosflow run examples.clicks:Clicks --bootstrap-servers 127.0.0.1:9092 \
        --group-id clicks --input-topic clicks --transactional-id clicks-1

Its settings (``--set name=value`` or ``EOSFLOW_APP_<NAME>``): ``output``, the output
topic (default ``<input>-per-window``), and ``window_s`` and ``grace_s``, the window
(default 300 s) and its grace (default 10 s). The window depends on the settings, so it
is declared in ``__init__``: eosflow reads ``windows`` from the processor it was given,
where this instance's own mapping hides the class's. ``eosflow.testing.check_windows``
checks a run against the input.
"""

from __future__ import annotations

import json
from typing import Any

import eosflow


class Clicks(eosflow.Processor):
    class Settings(eosflow.AppSettings):
        output: str | None = None  # the output topic (None: <input>-per-window)
        window_s: float = 300.0  # the window's size
        grace_s: float = 10.0  # how long a window stays open for late clicks

        def window(self) -> eosflow.Tumbling:
            return eosflow.Tumbling(size_s=self.window_s, grace_s=self.grace_s)

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or self.Settings()
        self.windows = {"clicks": self.settings.window()}

    def configure(self, config: eosflow.EosConfig) -> None:
        self.topic = self.settings.output or f"{config.input_topics[0]}-per-window"

    async def process(self, record: eosflow.Record) -> None:
        self.window("clicks").update(record.key or b"", _plus_one, 0)

    async def closed(self, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
        return final(self.topic, key, window, value)


def final(topic: str, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
    """A window's final count, as ``check_windows`` reads it by default."""
    body = {"start_ms": window.start_ms, "end_ms": window.end_ms, "value": value}
    return eosflow.Output(topic, json.dumps(body), key=key)


def _plus_one(n: int) -> int:
    return n + 1
