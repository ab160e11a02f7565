"""Typed records: orders read as a pydantic model, each written doubled as another,
with the key's previous order kept in a store of models.

    eosflow run examples.typed_orders:Doubles --bootstrap-servers 127.0.0.1:9092 \
        --group-id doubles --input-topic orders --transactional-id doubles-1 \
        --dead-letter-topic orders-dlq

``orders`` holds JSON values (``{"id": 7, "qty": 2}``) keyed by customer. An order that
does not validate goes to ``orders-dlq`` as it was written, with the failing field in
its ``eosflow.error.field`` header (``value.qty``); without a dead-letter topic the app
stops on it, naming the record and the field. A tombstone reaches ``process`` as None.
"""

from __future__ import annotations

from pydantic import BaseModel

import eosflow


class Order(BaseModel):
    id: int
    qty: int


class Doubled(BaseModel):
    id: int
    qty: int
    before: int  # the customer's previous order's qty (0: none)


class Doubles(eosflow.Processor):
    topics = {
        "orders": eosflow.Topic(key=str, value=Order),
        "doubled": eosflow.Topic(key=str, value=Doubled),
    }
    stores = {"last": eosflow.Model(Order)}

    async def process(self, record: eosflow.Record[str, Order]) -> eosflow.Output | None:
        order, customer = record.value, record.key
        if order is None or customer is None:
            return None  # a tombstone: nothing to double
        last = self.state("last")
        before = last.get(customer)
        last.put(customer, order)
        done = Doubled(id=order.id, qty=2 * order.qty, before=before.qty if before else 0)
        return eosflow.Output("doubled", done, key=customer)
