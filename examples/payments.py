"""Orders joined with their payments within 15 minutes (a windowed stream-stream join).

Two input topics, orders and payments, keyed by order id and co-partitioned (the same
partition count, keys partitioned alike): ``--input-topic orders --input-topic payments``
(the first is the orders). Each order and each payment whose Kafka timestamps are at
most ``within_s`` apart (a setting: ``--set within_s=...`` or ``EOSFLOW_APP_WITHIN_S``;
default 900) is produced once, as a JSON object
``{"order": ..., "payment": ..., "gap_ms": ...}`` (the two values, decoded as JSON) to
``<orders>-paid``: an inner join, every pair of an order id within the window.

How: ``copartitioned = True`` puts partition p of both topics on one instance and takes
their records in timestamp order. Each side keeps its records of the last window in its
own store (a list per order id), pruned by an event-time timer, and reads the other
side's store of the same partition number with ``state_of``: the later record of a pair
finds the earlier, so each pair is produced once -- by the input alone, on every run and
after any crash. Records without a key join nothing. There is no grace past the window:
an entry is pruned once its own partition's stream time passes it by the window, so a
record arriving out of order may find its partner gone, and the pair is not produced.

    eosflow run examples.payments:PaidOrders --bootstrap-servers 127.0.0.1:9092 \
        --group-id paid --input-topic orders --input-topic payments --transactional-id paid-1
"""

from __future__ import annotations

import json
from typing import Any

import eosflow


class PaidOrders(eosflow.Processor):
    class Settings(eosflow.AppSettings):
        within_s: float = 900.0  # the most an order and its payment may be apart

    copartitioned = True
    stores = {"orders": eosflow.JSON, "payments": eosflow.JSON}

    def __init__(self, settings: Settings | None = None) -> None:
        self.within_ms = round((settings or self.Settings()).within_s * 1000)

    def configure(self, config: eosflow.EosConfig) -> None:
        if len(config.input_topics) != 2:
            raise eosflow.ConfigError(
                "PaidOrders joins two input topics: --input-topic <orders> "
                f"--input-topic <payments>, not {list(config.input_topics)}"
            )
        self.orders, self.payments = config.input_topics
        self.topic = f"{self.orders}-paid"

    async def process(self, record: eosflow.Record) -> list[eosflow.Output]:
        key, t = record.key, record.timestamp
        if key is None:  # an inner join: nothing to join on
            return []
        mine, other, other_topic = (
            ("orders", "payments", self.payments)
            if record.topic == self.orders
            else ("payments", "orders", self.orders)
        )
        value = json.loads(record.value or b"null")
        kept: list[list[Any]] = self.state(mine).get(key, [])
        kept.append([t, value])
        self.state(mine).put(key, kept)
        # pruned once the partition's stream time passes the oldest by more than the window
        self.timers.at(min(e[0] for e in kept) + self.within_ms + 1, key, mine)
        out = []
        for t_other, v_other in self.state_of(other_topic, other).get(key, []):
            if abs(t - t_other) <= self.within_ms:
                pair = {mine[:-1]: value, other[:-1]: v_other, "gap_ms": abs(t - t_other)}
                out.append(eosflow.Output(self.topic, json.dumps(pair), key=key))
        return out

    async def fire(self, timer: eosflow.Timer) -> None:
        """Drop what no record to come can pair with (its payload: the side, the store);
        wake again for the rest."""
        name, within = timer.payload.decode(), self.within_ms
        kept = [e for e in self.state(name).get(timer.key, []) if e[0] + within >= timer.time_ms]
        if kept:
            self.state(name).put(timer.key, kept)
            self.timers.at(min(e[0] for e in kept) + within + 1, timer.key, name)
        else:
            self.state(name).delete(timer.key)
