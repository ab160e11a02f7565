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

Its setting (``--set customers_topic=...`` or ``EOSFLOW_APP_CUSTOMERS_TOPIC``) names the
table topic (default ``customers``). The table depends on it, so it is declared in
``__init__``: eosflow reads ``tables`` from the processor it was given, where this
instance's own mapping hides the class's.
"""

from __future__ import annotations

import json

import eosflow


class EnrichOrders(eosflow.Processor):
    class Settings(eosflow.AppSettings):
        customers_topic: str = "customers"  # the table topic

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or self.Settings()
        self.tables = {"customers": eosflow.Table(self.settings.customers_topic)}

    def configure(self, config: eosflow.EosConfig) -> None:
        self.topic = f"{config.input_topics[0]}-enriched"

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        order = json.loads(record.value or b"{}")
        order["customer"] = self.table("customers").get(record.key or b"")
        return eosflow.Output(self.topic, json.dumps(order), key=record.key)
