"""``PostgresSink``: a processor whose output is rows in PostgreSQL, written exactly
once -- the rows and the input positions they come from commit in one database
transaction, and a claim per partition fences instances that lost it (``_offsets``).
Its rows are what ``write`` makes of a batch, or -- ``into`` set -- each record's JSON
value, inserted or upserted (``_tables``)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from .._errors import ConfigError
from .._processor import Lifecycle
from .._records import Record
from ._dsn import Dsn
from ._tables import TableWrite

__all__ = ["PostgresSink"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")


class PostgresSink(Lifecycle):
    """Write each batch of input records into PostgreSQL, exactly once.

    Subclass it and override ``write``, which gets an asyncpg connection inside an open
    database transaction and the batch's records (in offset order per partition)::

        class Orders(eosflow.PostgresSink):
            async def write(self, conn, records):
                await conn.copy_records_to_table(
                    "orders", records=[(r.key, r.value) for r in records],
                    columns=["id", "body"])

    Or, for the common case, name a table (``into``): each record's value is a JSON
    object whose keys are the columns, inserted -- or with ``upsert = True`` replacing
    the row with its primary key, a tombstone deleting it (the rules:
    ``eosflow/sinks/_tables.py``)::

        class Orders(eosflow.PostgresSink):
            into = "orders"
            upsert = True

    In that same transaction eosflow checks that this instance still holds the
    partitions and moves their positions in the table ``offsets_table`` (made at start
    if missing): one COMMIT makes the rows and the positions durable, or neither. On
    assignment the positions come from that table, not from Kafka; the group's
    offsets in Kafka are committed afterwards for lag and ``eosflow status`` only.

    ``dsn``: the database, as libpq takes it -- a ``postgresql://`` URI or ``key=value``
    pairs (default: the environment variable ``EOSFLOW_POSTGRES_DSN``); its password never
    reaches a log line or an error. A batch is what one eosflow transaction would hold
    (``commit_interval_s``, ``max_records_per_txn``). What ``write`` does outside the
    connection (a call to another service) is not undone by a rollback: keep it
    idempotent. The sink runs the classic group protocol.

    It has a ``Processor``'s lifecycle hooks and ``observer``, and none of its state
    surface (``state()``, windows, tables, timers): its state is the database's, kept by
    ``write`` (a subclass declaring some is refused at start: ``sinks.stateless``).
    """

    offsets_table: ClassVar[str] = "eosflow_offsets"
    into: ClassVar[str | None] = None
    upsert: ClassVar[bool] = False

    def __init__(self, dsn: str | None = None) -> None:
        self.dsn = dsn
        self._table: TableWrite | None = None

    def database(self) -> Dsn:
        """The DSN to connect with (``Dsn``: a URI or libpq's key=value pairs, its password
        kept apart), or a ``ConfigError`` naming the setting -- never the DSN."""
        text = self.dsn or os.environ.get("EOSFLOW_POSTGRES_DSN")
        if not text:
            raise ConfigError(
                f"{type(self).__name__}: no database: pass dsn= or set EOSFLOW_POSTGRES_DSN"
            )
        setting = f"{type(self).__name__}(dsn=...)" if self.dsn else "EOSFLOW_POSTGRES_DSN"
        dsn = Dsn.parse(text, setting)
        name = type(self).__name__
        for setting in ("offsets_table", "into"):
            value = getattr(self, setting)
            if value is not None and not _NAME.fullmatch(value):
                raise ConfigError(
                    f"{name}.{setting} {value!r} is not a table name (letters, digits "
                    "and _, optionally schema.table)"
                )
        overridden = type(self).write is not PostgresSink.write
        if overridden == (self.into is not None):
            raise ConfigError(
                f"{name}: override write() or set into = 'a_table', one of the two"
                + (" (both are set)" if overridden else "")
            )
        return dsn

    async def prepare(self, conn: Any) -> None:
        """Called once at start with a connection, in a transaction of its own that
        instances starting together take in turns (an advisory lock): make or check
        what ``write`` needs (with ``into``: its columns and primary key are read
        here, a missing table is a ``ConfigError``). Override to create tables; call
        ``super().prepare(conn)`` when ``into`` is set."""
        if self.into is not None:
            self._table = await TableWrite.read(conn, self.into, self.upsert, type(self).__name__)

    async def write(self, conn: Any, records: Sequence[Record]) -> None:
        """Write ``records`` with ``conn`` (an asyncpg connection in an open transaction).
        Raising rolls the transaction back; the app stops with the error. The default
        writes into ``into`` (see the class)."""
        if self._table is None:
            raise ConfigError(f"{type(self).__name__}: write() with into set needs prepare()")
        await self._table.write(conn, records)
