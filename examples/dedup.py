"""Drop records whose id was already seen within a retention window (event time).

The id is the record's key. The store ``seen`` maps an id to the timestamp it was last
passed at; ``expiry`` orders the same ids by that timestamp (key: 8-byte big-endian
milliseconds + id), so that ids older than the window are found by a range scan and
forgotten. Both stores commit with the outputs, so a record is passed exactly once even
across crashes and rebalances, and a duplicate is dropped whichever instance sees it.

    eosflow run examples.dedup:Dedup --bootstrap-servers 127.0.0.1:9092 \
        --group-id dedup --input-topic events --transactional-id dedup-1

Its settings (``--set name=value`` or ``EOSFLOW_APP_<NAME>``): ``output``, the output
topic (default ``<input>-unique``), and ``window_s``, the window (default 3600 s).
Duplicates must share a partition (they do when the id is the key).
"""

from __future__ import annotations

import struct

import eosflow

_TS = struct.Struct(">q")


class Dedup(eosflow.Processor):
    class Settings(eosflow.AppSettings):
        output: str | None = None  # the output topic (None: <input>-unique)
        window_s: float = 3600.0  # how long an id is remembered

    stores = {"seen": eosflow.JSON, "expiry": eosflow.BYTES}

    def __init__(self, settings: Settings | None = None) -> None:
        settings = settings or self.Settings()
        self.output = settings.output
        self.window_ms = int(settings.window_s * 1000)

    async def process(self, record: eosflow.Record) -> eosflow.Output | None:
        seen, expiry = self.state("seen"), self.state("expiry")
        now = record.timestamp
        self._expire(seen, expiry, now - self.window_ms)
        key = record.key or b""
        last = seen.get(key)
        if last is not None and now - last < self.window_ms:
            return None  # a duplicate within the window
        if last is not None:
            expiry.delete(_TS.pack(last) + key)
        seen.put(key, now)
        expiry.put(_TS.pack(now) + key, b"")
        topic = self.output or f"{record.topic}-unique"
        return eosflow.Output(topic, record.value, key=key, headers=record.headers)

    def _expire(self, seen: eosflow.Store, expiry: eosflow.Store, before_ms: int) -> None:
        """Forget the ids last passed before ``before_ms``."""
        old = [k for k, _ in expiry.range(None, _TS.pack(max(before_ms, 0)))]
        for k in old:
            expiry.delete(k)
            seen.delete(k[_TS.size :])
