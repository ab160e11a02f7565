"""Enrichment with a small reference table: attach each order's customer record.

Orders are JSON values keyed by order id; the customer table is loaded once on start.
Orders whose customer is unknown are dead-lettered when ``--dead-letter-topic`` is set
(the ``KeyError`` becomes the dead-letter record's error header), or stop the app.

    eosflow run examples.enrich:EnrichOrders --group-id enrich --input-topic orders \
        --transactional-id enrich-1 --dead-letter-topic orders-dlq
"""

from __future__ import annotations

import json

import eosflow

CUSTOMERS = {
    "c1": {"name": "Ada", "tier": "gold"},
    "c2": {"name": "Grace", "tier": "silver"},
    "c3": {"name": "Linus", "tier": "bronze"},
}


class EnrichOrders(eosflow.Processor):
    output_topic = "orders-enriched"

    async def on_start(self) -> None:
        self.customers = dict(CUSTOMERS)  # a real app would load this from a service

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        order = json.loads(record.value or b"{}")
        customer = self.customers[order["customer"]]  # KeyError: unknown customer
        enriched = {**order, "customer_name": customer["name"], "tier": customer["tier"]}
        return eosflow.Output(self.output_topic, json.dumps(enriched).encode(), key=record.key)
