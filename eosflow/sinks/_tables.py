"""``TableWrite``: the declarative write of a ``PostgresSink`` with ``into`` set -- each
record's JSON value a row, its keys the columns, inserted or upserted.

The JSON-to-row conversion is PostgreSQL's own (``jsonb_populate_recordset``), so a
value takes the column's type as a ``json`` cast would: ``"2026-11-28T10:00:00Z"`` into
a ``timestamptz``, ``12.5`` into a ``numeric``, an object into a ``jsonb``. A record
writes the columns its value names, and only those (keys naming no column are ignored;
``null`` writes NULL), so the result does not depend on how records fall into batches.
The table's shape is read once, by ``prepare`` at start: a column added while the app
runs is seen after a restart.

- insert (``upsert = False``): one row per record; the columns it does not name take
  their defaults. A tombstone (no value) has nothing to insert and is skipped.
- upsert (``upsert = True``; the table needs a primary key): a record writes the
  columns it names into the row with its primary key -- a new row takes the defaults
  for the others, an existing one keeps them (``INSERT ... ON CONFLICT (pk) DO UPDATE``
  of the named columns). A tombstone deletes the row whose one-column primary key, as
  text, is the record's key (with a composite primary key it cannot be told which row:
  ``FatalError``). Within a batch a key's records are merged in the order of the log,
  as one after the other would leave the row.

A value that is not a JSON object stops the app (``FatalError`` naming the record):
writing the rest past it would lose it silently, and trying again reads it again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._errors import ConfigError, FatalError
from .._records import Record

__all__ = ["TableWrite"]

_COLUMNS = (
    "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0"
    " AND NOT attisdropped ORDER BY attnum"
)
_PRIMARY_KEY = (
    "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
    " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
    " WHERE i.indrelid = $1::regclass AND i.indisprimary"
    " ORDER BY array_position(i.indkey, a.attnum)"
)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _as_text(value: Any) -> str:
    """A primary key value as PostgreSQL's ``::text`` of it would read (for strings and
    numbers), so a record's key and a JSON field compare alike."""
    return value if isinstance(value, str) else json.dumps(value)


class TableWrite:
    """The write of one table (see the module): made by ``read`` from the catalog."""

    def __init__(self, table: str, columns: list[str], key: list[str], upsert: bool) -> None:
        self.table, self.columns, self.key, self.upsert = table, columns, key, upsert

    @classmethod
    async def read(cls, conn: Any, table: str, upsert: bool, owner: str) -> TableWrite:
        """The table's columns and primary key; a ``ConfigError`` for an upsert into a
        table without a primary key (a table that does not exist is one from the
        error mapping: ``UndefinedTableError``)."""
        columns = [r["attname"] for r in await conn.fetch(_COLUMNS, table)]
        key = [r["attname"] for r in await conn.fetch(_PRIMARY_KEY, table)]
        if upsert and not key:
            raise ConfigError(
                f"{owner}.upsert needs a primary key on {table}: it has none "
                "(add one, or set upsert = False to insert)"
            )
        return cls(table, columns, key, upsert)

    async def write(self, conn: Any, records: Sequence[Record]) -> None:
        """Insert or upsert ``records`` (see the module): the upserts of one key merged
        in the order of the log, the deletes first, then one statement per set of
        columns named."""
        rows: dict[Any, dict[str, Any]] = {}
        gone: dict[str, None] = {}
        appended: list[dict[str, Any]] = []
        for r in records:
            if r.value is None:
                if self.upsert:
                    name = self._deleted(r)
                    rows.pop(name, None)  # what came before it in the batch is gone too
                    gone[name] = None
                continue
            row = self._decoded(r)
            if not self.upsert:
                appended.append(row)
                continue
            name = self._name(row, r)
            rows.setdefault(name, {}).update(row)  # later fields over earlier ones
        if gone:  # before the upserts: a key deleted, then written again, is a new row
            await conn.execute(
                f"DELETE FROM {self.table} WHERE {_quoted(self.key[0])}::text = ANY($1::text[])",
                list(gone),
            )
        shapes: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for row in rows.values() if self.upsert else appended:
            shapes.setdefault(tuple(c for c in self.columns if c in row), []).append(row)
        for columns, same in shapes.items():
            await conn.execute(self._statement(columns), json.dumps(same))

    def _statement(self, columns: tuple[str, ...]) -> str:
        listed = ", ".join(_quoted(c) for c in columns)
        sql = (
            f"INSERT INTO {self.table} ({listed}) SELECT {listed}"
            f" FROM jsonb_populate_recordset(NULL::{self.table}, $1::jsonb)"
        )
        if not self.upsert:
            return sql
        updated = [c for c in columns if c not in self.key]
        conflict = ", ".join(_quoted(c) for c in self.key)
        if not updated:
            return f"{sql} ON CONFLICT ({conflict}) DO NOTHING"
        sets = ", ".join(f"{_quoted(c)} = EXCLUDED.{_quoted(c)}" for c in updated)
        return f"{sql} ON CONFLICT ({conflict}) DO UPDATE SET {sets}"

    def _decoded(self, r: Record) -> dict[str, Any]:
        assert r.value is not None
        try:
            row = json.loads(r.value)
        except ValueError as exc:
            raise FatalError(f"{_where(r)}: its value is not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise FatalError(f"{_where(r)}: its value is JSON but not an object")
        if not any(c in row for c in self.columns):
            raise FatalError(
                f"{_where(r)}: its value names no column of {self.table} "
                f"({', '.join(self.columns)})"
            )
        return row

    def _name(self, row: dict[str, Any], r: Record) -> Any:
        """The primary key of ``row``: its values as text (one column: the text alone)."""
        missing = [c for c in self.key if row.get(c) is None]
        if missing:
            raise FatalError(f"{_where(r)}: its value has no {', '.join(missing)} (the key)")
        names = tuple(_as_text(row[c]) for c in self.key)
        return names[0] if len(names) == 1 else names

    def _deleted(self, r: Record) -> str:
        if len(self.key) != 1:
            raise FatalError(
                f"{_where(r)}: a tombstone deletes by the record's key, and {self.table}'s "
                f"primary key has {len(self.key)} columns"
            )
        if r.key is None:
            raise FatalError(f"{_where(r)}: a tombstone without a key deletes nothing")
        return r.key.decode()


def _where(r: Record) -> str:
    return f"record {r.topic}[{r.partition}]@{r.offset}"
