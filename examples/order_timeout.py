"""Orders that expire when no payment comes within 15 minutes, with an event-time timer.

Input records are keyed by order id, with a JSON value ``{"type": "order"}`` or
``{"type": "payment"}``; their Kafka timestamps are when each happened. An order sets a
timer for 15 minutes after it; a payment before the timer fires cancels it and emits
``paid``; the timer firing emits ``expired``. A timer fires once the partition's stream
time (the latest event time seen there) passes it, in the same transaction as its
deletion: every order is ``paid`` or ``expired`` exactly once, across crashes,
rebalances and zombies. A payment for an order that already expired (or never came)
emits ``payment-without-order``.

    eosflow run examples.order_timeout:OrderTimeout --bootstrap-servers 127.0.0.1:9092 \
        --group-id orders --input-topic orders --transactional-id orders-1

Its settings (``--set name=value`` or ``EOSFLOW_APP_<NAME>``): ``output``, the output
topic (default ``<input>-outcomes``), and ``timeout_s``, the timeout (default 900 s).
"""

from __future__ import annotations

import json

import eosflow


class OrderTimeout(eosflow.Processor):
    class Settings(eosflow.AppSettings):
        output: str | None = None  # the output topic (None: <input>-outcomes)
        timeout_s: float = 900.0  # how long an order waits for its payment

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or self.Settings()
        self.timeout_ms = round(self.settings.timeout_s * 1000)

    def configure(self, config: eosflow.EosConfig) -> None:
        self.topic = self.settings.output or f"{config.input_topics[0]}-outcomes"

    async def process(self, record: eosflow.Record) -> eosflow.Output | None:
        order = record.key or b""
        kind = json.loads(record.value or b"{}").get("type")
        if kind == "order":
            self.timers.at(record.timestamp + self.timeout_ms, order)
            return None
        if kind == "payment":
            outcome = "paid" if self.timers.cancel(order) else "payment-without-order"
            return eosflow.Output(self.topic, outcome, key=order)
        raise ValueError(f"unknown record type {kind!r}")

    async def fire(self, timer: eosflow.Timer) -> eosflow.Output:
        return eosflow.Output(self.topic, "expired", key=timer.key)
