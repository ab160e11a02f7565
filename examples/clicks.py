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

``CLICKS_OUTPUT`` names the output topic (default ``<input>-per-window``),
``CLICKS_WINDOW_S`` and ``CLICKS_GRACE_S`` the window (default 300 s) and its grace
(default 10 s). ``eosflow.testing.check_windows`` checks a run against the input.
"""

from __future__ import annotations

import json
import os
from typing import Any

import eosflow

WINDOW = eosflow.Tumbling(
    size_s=float(os.environ.get("CLICKS_WINDOW_S", "300")),
    grace_s=float(os.environ.get("CLICKS_GRACE_S", "10")),
)


class Clicks(eosflow.Processor):
    windows = {"clicks": WINDOW}

    def configure(self, config: eosflow.EosConfig) -> None:
        default = f"{config.input_topics[0]}-per-window"
        self.topic = os.environ.get("CLICKS_OUTPUT") or default

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
