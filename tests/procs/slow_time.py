"""The slowed running count (``slow_count.py``) that also counts each key's records in
10 s tumbling windows (2 s grace; finals to ``CHAOS_OUT``-windows, as
``examples/clicks.py`` writes them) and in 5 s sliding windows (2 s grace; finals to
``CHAOS_OUT``-recent), keeps an idle timer per key: due 5 s of event time after the
key's last record, fired to ``CHAOS_OUT``-timers (value: its time), and a wall-clock
reminder per key: 0.5 s after its last record was processed, fired to
``CHAOS_OUT``-reminders (value: that record's offset)."""

import json
from typing import Any

from slow_count import SlowCount

import eosflow

WINDOW = eosflow.Tumbling(size_s=10, grace_s=2)
SLIDING = eosflow.Sliding(size_s=5, grace_s=2)
IDLE_MS = 5_000
REMIND_S = 0.5


class SlowTime(SlowCount):
    windows = {"clicks": WINDOW, "recent": SLIDING}

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        key = record.key or b""
        self.window("clicks").update(key, lambda n: n + 1, 0)
        self.sliding("recent").add(key, 1)
        self.timers.at(record.timestamp + IDLE_MS, key)
        self.timers.after(REMIND_S, key, str(record.offset))
        return await super().process(record)

    async def closed(self, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
        count = len(value) if window.store == "recent" else value
        final = {"start_ms": window.start_ms, "end_ms": window.end_ms, "value": count}
        topic = "recent" if window.store == "recent" else "windows"
        return eosflow.Output(f"{self.output}-{topic}", json.dumps(final), key=key)

    async def fire(self, timer: eosflow.Timer) -> eosflow.Output:
        if timer.wall_clock:
            return eosflow.Output(f"{self.output}-reminders", timer.payload, key=timer.key)
        return eosflow.Output(f"{self.output}-timers", str(timer.time_ms), key=timer.key)
