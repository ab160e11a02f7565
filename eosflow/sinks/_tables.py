"""``TableWrite``: the declarative write of a ``PostgresSink`` with ``into`` set -- each
record's JSON value a row, its keys the columns, inserted or upserted.

The JSON-to-row conversion is PostgreSQL's own (``jsonb_populate_recordset``), so a
value takes the column's type as a ``json`` cast would: ``"2026-11-28T10:00:00Z"`` into
a ``timestamptz``, ``12.5`` into a ``numeric``, an object into a ``jsonb``. A number
reaches PostgreSQL as it was written (never through a Python float), so a ``numeric``
column gets every digit. A record writes the columns its value names, and only those
(keys naming no column are ignored; ``null`` writes NULL), so the result does not
depend on how records fall into batches. Keys are matched to columns as spelled; a key
that differs from a column only in case (``"Amount"`` for ``amount``) stops the app
(``FatalError``) rather than be dropped unseen. Rows go in in the order of the log. The
table's shape is read once, by ``prepare`` at start: a column added while the app runs
is seen after a restart.

- insert (``upsert = False``): one row per record; the columns it does not name take
  their defaults. A tombstone (no value) has nothing to insert and is skipped.
- upsert (``upsert = True``; the table needs a primary key): a record writes the
  columns it names into the row with its primary key -- a new row takes the defaults
  for the others, an existing one keeps them (``INSERT ... ON CONFLICT (pk) DO UPDATE``
  of the named columns). A tombstone deletes the row whose one-column primary key is
  the record's key, converted as the insert converts a value (with a composite primary
  key it cannot be told which row: ``FatalError``). Within a batch a key's records are
  merged in the order of the log, as one after the other would leave the row, the key
  as first written; which records share a key is PostgreSQL's say (each key converted
  as the insert converts it and compared by the key columns' equality:
  ``1`` and ``1.0`` in a ``numeric``, a uuid in upper and lower case, are one key) --
  one query a batch.

A value that is not a JSON object stops the app (``FatalError`` naming the record):
writing the rest past it would lose it silently, and trying again reads it again.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from .._errors import ConfigError, FatalError
from .._records import Record
from ._sql import quoted, table_name

__all__ = ["TableWrite"]

_COLUMNS = (
    "SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute"
    " WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
)
_PRIMARY_KEY = (
    "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
    " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
    " WHERE i.indrelid = $1::regclass AND i.indisprimary"
    " ORDER BY array_position(i.indkey, a.attnum)"
)


class TableWrite:
    """The write of one table (see the module): made by ``read`` from the catalog."""

    def __init__(self, table: str, columns: dict[str, str], key: list[str], upsert: bool) -> None:
        self.table, self.key, self.upsert = table, key, upsert
        self.columns = list(columns)  # in the table's order
        self._sql = table_name(table)
        self._named = set(columns)
        self._folded = {c.lower(): c for c in columns}
        self._keys = set(key)
        self._statements: dict[tuple[str, ...], str] = {}

    @classmethod
    async def read(cls, conn: Any, table: str, upsert: bool, owner: str) -> TableWrite:
        """The table's columns and primary key; a ``ConfigError`` for an upsert into a
        table without a primary key (a table that does not exist is one from the
        error mapping: ``UndefinedTableError``)."""
        name = table_name(table)
        columns = {r["attname"]: r["type"] for r in await conn.fetch(_COLUMNS, name)}
        key = [r["attname"] for r in await conn.fetch(_PRIMARY_KEY, name)]
        if upsert and not key:
            raise ConfigError(
                f"{owner}.upsert needs a primary key on {table}: it has none "
                "(add one, or set upsert = False to insert)"
            )
        return cls(table, columns, key, upsert)

    async def write(self, conn: Any, records: Sequence[Record]) -> None:
        """Insert or upsert ``records`` (see the module)."""
        if not self.upsert:
            await self._put(conn, [self._decoded(r) for r in records if r.value is not None])
            return
        found: list[tuple[dict[str, Any], dict[str, Any] | None]] = []  # (its key, row)
        for r in records:
            if r.value is None:
                found.append((self._deleted(r), None))
            else:
                row = self._decoded(r)
                found.append((self._named_key(row, r), row))
        same = await self._same_keys(conn, [key for key, _ in found])
        rows: dict[int, dict[str, Any]] = {}  # by the first record of its key
        gone: dict[int, dict[str, Any]] = {}
        for i, (key, value) in enumerate(found):
            first = same[i]
            if value is None:
                rows.pop(first, None)  # what came before it in the batch is gone too
                gone[first] = key
            elif first in rows:  # later fields over earlier ones; the key as first
                # written, as ON CONFLICT leaves a stored row's key
                rows[first].update((c, v) for c, v in value.items() if c not in self._keys)
            else:
                rows[first] = dict(value)
        if gone:  # before the upserts: a key deleted, then written again, is a new row
            pk = ", ".join(quoted(c) for c in self.key)
            await conn.execute(
                f"DELETE FROM {self._sql} WHERE ({pk}) IN (SELECT {pk}"
                f" FROM jsonb_populate_recordset(NULL::{self._sql}, $1::jsonb))",
                _exact_json(list(gone.values())),
            )
        await self._put(conn, list(rows.values()))

    async def _put(self, conn: Any, rows: list[dict[str, Any]]) -> None:
        """``rows`` with one statement per set of columns named: inserts in runs, so
        that rows go in in the order of the log; upserts grouped (one row per key: the
        order across keys tells nothing)."""
        shapes = [tuple(c for c in self.columns if c in row) for row in rows]
        if self.upsert:
            grouped: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for shape, row in zip(shapes, rows, strict=True):
                grouped.setdefault(shape, []).append(row)
            for shape, same in grouped.items():
                await conn.execute(self._statement(shape), _exact_json(same))
            return
        start = 0
        for i in range(1, len(rows) + 1):
            if i == len(rows) or shapes[i] != shapes[start]:
                await conn.execute(self._statement(shapes[start]), _exact_json(rows[start:i]))
                start = i

    async def _same_keys(self, conn: Any, keys: list[dict[str, Any]]) -> list[int]:
        """For each key, the index of the first one PostgreSQL finds equal to it: each
        converted as the insert converts it (``jsonb_populate_record``: a too-long
        ``varchar`` refused alike) and grouped by the key columns' equality, the
        unique index's own (``1`` and ``1.0`` in a ``numeric``, a uuid in capitals and
        in lower case, are one key). One query a batch. (A nondeterministic collation
        on a key column is not known to be honoured: not tried, this build of
        PostgreSQL has no ICU.)"""
        same = list(range(len(keys)))
        if not keys:
            return same
        pk = ", ".join(f"r.{quoted(c)}" for c in self.key)
        groups = await conn.fetch(
            "SELECT array_agg(e.o) AS o FROM jsonb_array_elements($1::jsonb)"
            f" WITH ORDINALITY AS e(v, o), LATERAL jsonb_populate_record(NULL::{self._sql}, e.v)"
            f" AS r GROUP BY {pk}",
            _exact_json(keys),
        )
        for group in groups:
            first = min(group["o"]) - 1
            for o in group["o"]:
                same[o - 1] = first
        return same

    def _statement(self, columns: tuple[str, ...]) -> str:
        sql = self._statements.get(columns)
        if sql is None:
            sql = self._statements[columns] = self._made(columns)
        return sql

    def _made(self, columns: tuple[str, ...]) -> str:
        listed = ", ".join(quoted(c) for c in columns)
        sql = (
            f"INSERT INTO {self._sql} ({listed}) SELECT {listed}"
            f" FROM jsonb_populate_recordset(NULL::{self._sql}, $1::jsonb)"
        )
        if not self.upsert:
            return sql
        updated = [c for c in columns if c not in self.key]
        conflict = ", ".join(quoted(c) for c in self.key)
        if not updated:
            return f"{sql} ON CONFLICT ({conflict}) DO NOTHING"
        sets = ", ".join(f"{quoted(c)} = EXCLUDED.{quoted(c)}" for c in updated)
        return f"{sql} ON CONFLICT ({conflict}) DO UPDATE SET {sets}"

    def _decoded(self, r: Record) -> dict[str, Any]:
        assert r.value is not None
        try:
            row = json.loads(r.value, parse_float=Decimal, parse_constant=_no_constant)
        except ValueError as exc:
            raise FatalError(f"{_where(r)}: its value is not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise FatalError(f"{_where(r)}: its value is JSON but not an object")
        for k in row.keys() - self._named:
            column = self._folded.get(k.lower())
            if column is not None:
                raise FatalError(
                    f"{_where(r)}: its key {k!r} names no column of {self.table}; "
                    f"keys are matched as spelled -- {column!r}?"
                )
        if self._named.isdisjoint(row):
            raise FatalError(
                f"{_where(r)}: its value names no column of {self.table} "
                f"({', '.join(self.columns)})"
            )
        return row

    def _named_key(self, row: dict[str, Any], r: Record) -> dict[str, Any]:
        """The primary key's fields of ``row``."""
        missing = [c for c in self.key if row.get(c) is None]
        if missing:
            raise FatalError(f"{_where(r)}: its value has no {', '.join(missing)} (the key)")
        return {c: row[c] for c in self.key}

    def _deleted(self, r: Record) -> dict[str, Any]:
        if len(self.key) != 1:
            raise FatalError(
                f"{_where(r)}: a tombstone deletes by the record's key, and {self.table}'s "
                f"primary key has {len(self.key)} columns"
            )
        if r.key is None:
            raise FatalError(f"{_where(r)}: a tombstone without a key deletes nothing")
        try:
            return {self.key[0]: r.key.decode()}
        except UnicodeDecodeError:
            raise FatalError(f"{_where(r)}: a tombstone's key is not UTF-8 text") from None


def _exact_json(rows: list[dict[str, Any]]) -> str:
    """``rows`` as JSON, each number with a fraction or an exponent written as it came
    (``Decimal``, from ``_decoded``): PostgreSQL reads JSON numbers exactly, where a
    float would have kept ~16 significant digits. ``json.dumps`` meets a ``Decimal``
    only through ``default``: it is written as a marker string, unique to this call,
    then replaced by its digits."""
    literals: list[str] = []
    marker = secrets.token_hex(8)

    def mark(o: object) -> str:
        if not isinstance(o, Decimal):
            raise TypeError(f"{type(o).__name__} is not JSON")
        literals.append(str(o))
        return f"{marker}:{len(literals) - 1}"

    text = json.dumps(rows, default=mark)
    if not literals:
        return text
    return re.sub(f'"{marker}:(\\d+)"', lambda m: literals[int(m.group(1))], text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no number PostgreSQL reads")


def _where(r: Record) -> str:
    return f"record {r.topic}[{r.partition}]@{r.offset}"
