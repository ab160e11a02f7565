"""Orders into PostgreSQL, exactly once: each record of the input topic becomes one row
of the table ``orders`` (made if missing), its JSON value in a ``jsonb`` column, written
by COPY. The rows and the input positions commit in one database transaction, so a
crash, a rebalance or a zombie instance never writes a row twice or loses one -- and
the table needs no unique constraint for that.

    EOSFLOW_POSTGRES_DSN=postgresql://app@127.0.0.1:5432/shop \\
    eosflow run examples.orders_sink:Orders --bootstrap-servers 127.0.0.1:9092 \\
        --group-id orders-db --input-topic orders --transactional-id orders-db-1
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import eosflow

TABLE = """
CREATE TABLE IF NOT EXISTS orders (
    topic text NOT NULL, partition integer NOT NULL, "offset" bigint NOT NULL,
    id text, body jsonb, at timestamptz NOT NULL DEFAULT now()
)"""


class Orders(eosflow.PostgresSink):
    async def prepare(self, conn: Any) -> None:
        await conn.execute(TABLE)  # once, at start; a migration tool's job in production

    async def write(self, conn: Any, records: Sequence[eosflow.Record]) -> None:
        await conn.copy_records_to_table(
            "orders",
            records=[
                (r.topic, r.partition, r.offset, r.key.decode() if r.key else None, _text(r))
                for r in records
            ],
            columns=["topic", "partition", "offset", "id", "body"],
        )


def _text(record: eosflow.Record) -> str | None:
    """The value as jsonb's text (COPY parses it); None for a tombstone."""
    return None if record.value is None else record.value.decode()
