"""``PostgresSink``: a processor whose output is rows in PostgreSQL, written exactly
once -- the rows and the input positions they come from commit in one database
transaction, and a claim per partition fences instances that lost it (``_offsets``)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from .._errors import ConfigError
from .._processor import Processor
from .._records import Record

__all__ = ["PostgresSink"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")


class PostgresSink(Processor):
    """Write each batch of input records into PostgreSQL, exactly once.

    Subclass it and override ``write``, which gets an asyncpg connection inside an open
    database transaction and the batch's records (in offset order per partition)::

        class Orders(eosflow.PostgresSink):
            async def write(self, conn, records):
                await conn.copy_records_to_table(
                    "orders", records=[(r.key, r.value) for r in records],
                    columns=["id", "body"])

    In that same transaction eosflow checks that this instance still holds the
    partitions and moves their positions in the table ``offsets_table`` (made at start
    if missing): one COMMIT makes the rows and the positions durable, or neither. On
    assignment the positions come from that table, not from Kafka; the group's
    offsets in Kafka are committed afterwards for lag and ``eosflow status`` only.

    ``dsn``: the database (a ``postgresql://`` URL; default: the environment variable
    ``EOSFLOW_POSTGRES_DSN``). A batch is what one eosflow transaction would hold
    (``commit_interval_s``, ``max_records_per_txn``). What ``write`` does outside the
    connection (a call to another service) is not undone by a rollback: keep it
    idempotent. The sink runs the classic group protocol.
    """

    offsets_table: ClassVar[str] = "eosflow_offsets"

    def __init__(self, dsn: str | None = None) -> None:
        self.dsn = dsn

    def database(self) -> str:
        """The DSN to connect with, or a ``ConfigError`` naming the setting."""
        dsn = self.dsn or os.environ.get("EOSFLOW_POSTGRES_DSN")
        if not dsn:
            raise ConfigError(
                f"{type(self).__name__}: no database: pass dsn= or set EOSFLOW_POSTGRES_DSN"
            )
        if not _NAME.fullmatch(self.offsets_table):
            raise ConfigError(
                f"{type(self).__name__}.offsets_table {self.offsets_table!r} is not a table "
                "name (letters, digits and _, optionally schema.table)"
            )
        return dsn

    async def write(self, conn: Any, records: Sequence[Record]) -> None:
        """Write ``records`` with ``conn`` (an asyncpg connection in an open transaction).
        Raising rolls the transaction back; the app stops with the error."""
        raise NotImplementedError(f"{type(self).__name__} must override PostgresSink.write")
