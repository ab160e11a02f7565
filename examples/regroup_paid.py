"""Orders keyed by customer and payments keyed by payment, both regrouped by order id and
joined: a stream-stream join after the regroup.

    eosflow run examples.regroup_paid:PaidAfterRegroup --bootstrap-servers 127.0.0.1:9092 \
        --group-id paid --input-topic orders --input-topic payments --transactional-id paid-1

Stages ``orders-by-id`` and ``payments-by-id`` regroup each record of the settings
``orders`` and ``payments`` (defaults ``orders``, ``payments``; values: JSON naming the
``order``, a payment's also its ``pay``) under its order id. Stage ``paid`` is
``copartitioned``: partition p of both repartition topics go to one instance, their
records merged in timestamp order. Each side keeps its records in its own store and
reads the other side's with ``state_of``, naming the other stage. The later record of a
pair finds the earlier, so each order and its payment are written once, ``[order,
pay]``, keyed by the order id, to ``output`` (default ``<orders>-paid``). The two
repartition topics get one partition count (the larger of their defaults).
"""

from __future__ import annotations

import json

import eosflow


class ById(eosflow.Processor):
    """An order or a payment, regrouped by its order id."""

    async def process(self, record: eosflow.Record) -> eosflow.Regroup:
        order = json.loads(record.value or b"{}")["order"]
        return eosflow.Regroup(key=str(order), value=record.value)


class PaidJoin(eosflow.Processor):
    """Orders and payments regrouped by order id, joined: each side kept in its own
    store, the other side's read by its stage's name."""

    copartitioned = True
    stores = {"orders": eosflow.JSON, "payments": eosflow.JSON}

    def __init__(self, output: str) -> None:
        self.output = output

    def configure(self, config: eosflow.EosConfig) -> None:
        self.orders_topic = config.input_topics[0]  # the real name, as records give it

    async def process(self, record: eosflow.Record) -> eosflow.Output | None:
        key, value = record.key or b"", json.loads(record.value or b"{}")
        mine, other, other_stage = (
            ("orders", "payments", "payments-by-id")
            if record.topic == self.orders_topic
            else ("payments", "orders", "orders-by-id")
        )
        self.state(mine).put(key, value)
        found = self.state_of(other_stage, other).get(key)
        if found is None:
            return None
        order, payment = (value, found) if mine == "orders" else (found, value)
        return eosflow.Output(self.output, json.dumps([order["order"], payment["pay"]]), key=key)


class PaidAfterRegroup(eosflow.Pipeline):
    class Settings(eosflow.AppSettings):
        orders: str = "orders"  # the orders' topic
        payments: str = "payments"  # the payments' topic
        output: str | None = None  # the output topic (None: <orders>-paid)

    def __init__(self, settings: Settings | None = None) -> None:
        s = settings or self.Settings()
        self.stages = {
            "orders-by-id": eosflow.Stage(ById(), inputs=(s.orders,)),
            "payments-by-id": eosflow.Stage(ById(), inputs=(s.payments,)),
            "paid": eosflow.Stage(
                PaidJoin(s.output or f"{s.orders}-paid"),
                inputs=("orders-by-id", "payments-by-id"),
            ),
        }
