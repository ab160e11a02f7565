"""Orders enriched with their customer's row as of the order's time (a stream-table join).

The input (orders) and the table topic (customers, one row per customer id, the latest
wins; a null value deletes) are keyed by customer id and co-partitioned: the same
partition count, keys partitioned alike. Each order (a JSON object) is produced to
``<input>-enriched`` with a ``customer`` field: the customer's row at the order's
timestamp, or null when there was none (a left join; drop those for an inner join).

Rows and orders are taken in timestamp order, so which row an order sees depends on the
two topics alone, never on which was fetched first: the same input gives the same
outputs on every run and after any crash, and the table's position commits with them.

    eosflow run examples.customers:EnrichOrders --bootstrap-servers 127.0.0.1:9092 \
        --group-id enrich --input-topic orders --transactional-id enrich-1

``CUSTOMERS_TOPIC`` names the table topic (default ``customers``).
"""

from __future__ import annotations

import json
import os

import eosflow


class EnrichOrders(eosflow.Processor):
    tables = {"customers": eosflow.Table(os.environ.get("CUSTOMERS_TOPIC", "customers"))}

    def configure(self, config: eosflow.EosConfig) -> None:
        self.topic = f"{config.input_topics[0]}-enriched"

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        order = json.loads(record.value or b"{}")
        order["customer"] = self.table("customers").get(record.key or b"")
        return eosflow.Output(self.topic, json.dumps(order), key=record.key)
