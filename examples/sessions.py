"""User sessions: a user's visits until 30 minutes pass without one, each session's final
(its visits, first and last visit) emitted once when it closes.

The record's key is the user; its Kafka timestamp is when the visit happened. A visit
within the gap of a session extends it; one that bridges two sessions of the user merges
them (their counts added). A session closes once the partition's stream time (the latest
visit time seen there) passes its last visit plus the gap and the grace; its final is
then emitted (key: the user, value: JSON ``{"start_ms": ..., "end_ms": ..., "value":
visits}``, ``start_ms`` and ``end_ms`` its first and last visit), in the same transaction
as the session's deletion from the store: exactly once across crashes, rebalances and
zombies. Visits that would reopen a closed session are late: counted, or dead-lettered
when a dead-letter topic is set.

    eosflow run examples.sessions:Sessions --bootstrap-servers 127.0.0.1:9092 \
        --group-id sessions --input-topic visits --transactional-id sessions-1

Its settings (``--set name=value`` or ``EOSFLOW_APP_<NAME>``): ``output``, the output
topic (default ``<input>-sessions``), and ``gap_s`` and ``grace_s``, the inactivity that
ends a session (default 1800 s) and the grace (default 60 s). The session window depends
on them, so it is declared in ``__init__``, as in ``examples/clicks.py``.
``eosflow.testing.check_windows`` checks a run against the input.
"""

from __future__ import annotations

import json
import operator
from typing import Any

import eosflow


class Sessions(eosflow.Processor):
    class Settings(eosflow.AppSettings):
        output: str | None = None  # the output topic (None: <input>-sessions)
        gap_s: float = 1800.0  # the inactivity that ends a session
        grace_s: float = 60.0  # how long a session stays open for late visits

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or self.Settings()
        session = eosflow.Session(gap_s=self.settings.gap_s, grace_s=self.settings.grace_s)
        self.windows = {"visits": session}

    def configure(self, config: eosflow.EosConfig) -> None:
        self.topic = self.settings.output or f"{config.input_topics[0]}-sessions"

    async def process(self, record: eosflow.Record) -> None:
        visits = self.session("visits")
        visits.update(record.key or b"", _plus_one, 0, merge=operator.add)

    async def closed(self, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
        final = {"start_ms": window.start_ms, "end_ms": window.end_ms, "value": value}
        return eosflow.Output(self.topic, json.dumps(final), key=key)


def _plus_one(n: int) -> int:
    return n + 1
