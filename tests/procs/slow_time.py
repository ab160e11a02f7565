"""The slowed running count (``slow_count.py``) that also counts each key's records in
10 s tumbling windows (2 s grace; finals to ``CHAOS_OUT``-windows, as
``examples/clicks.py`` writes them) and keeps an idle timer per key: due 5 s of event
time after the key's last record, fired to ``CHAOS_OUT``-timers (value: its time)."""

import json
from typing import Any

from slow_count import SlowCount

import eosflow

WINDOW = eosflow.Tumbling(size_s=10, grace_s=2)
IDLE_MS = 5_000


class SlowTime(SlowCount):
    windows = {"clicks": WINDOW}

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        key = record.key or b""
        self.window("clicks").update(key, lambda n: n + 1, 0)
        self.timers.at(record.timestamp + IDLE_MS, key)
        return await super().process(record)

    async def closed(self, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
        final = {"start_ms": window.start_ms, "end_ms": window.end_ms, "value": value}
        return eosflow.Output(f"{self.output}-windows", json.dumps(final), key=key)

    async def fire(self, timer: eosflow.Timer) -> eosflow.Output:
        return eosflow.Output(f"{self.output}-timers", str(timer.time_ms), key=timer.key)
