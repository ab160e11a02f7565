"""The input positions kept in the database: the table, a claim on assignment, and the
check and advance inside each write transaction. All of the sink's SQL is here.

One row per (group, topic, partition): ``next_offset`` (the first input record not yet
written; NULL before the first write) and ``epoch``, raised by every claim. Why it is
exactly once:

- A write transaction first locks its partitions' rows (``FOR UPDATE``) and checks that
  each still has the epoch of this instance's claim and the next offset it expects; then
  the rows of the sink are written and the offsets advanced, and one COMMIT makes both
  durable or neither.
- A claim (``UPDATE ... SET epoch = epoch + 1``) waits for a write transaction holding
  those rows and then reads the offsets it committed; a write transaction that comes
  after a claim finds the epoch moved and writes nothing. So a zombie -- an instance
  whose partitions were given to another while it was stopped -- can never write again,
  whatever it held in memory.
- After a failure whose outcome is unknown (the connection lost during COMMIT), the
  positions are read back from here: the database says what was committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigError
from .._records import Partition
from ._sql import table_name

__all__ = ["OffsetsTable", "PartitionClaim", "PartitionLost"]

# the shape checked at start: name -> PostgreSQL's data type
_COLUMNS = {
    "group_id": "text",
    "topic": "text",
    "partition": "integer",
    "next_offset": "bigint",
    "epoch": "bigint",
}


class PartitionLost(Exception):
    """A write transaction found partitions not as this instance left them, and wrote
    nothing: ``partitions`` claimed by another instance (their epoch moved), and
    ``moved``: still this instance's, at another position (a write whose outcome was
    unknown did commit) -- where they stand now."""

    def __init__(
        self, partitions: Iterable[Partition], moved: Mapping[Partition, PartitionClaim]
    ) -> None:
        self.partitions, self.moved = frozenset(partitions), dict(moved)
        names = ", ".join(f"{t}[{p}]" for t, p in sorted(self.partitions | set(self.moved)))
        super().__init__(f"not where this instance left them: {names}")


@dataclass(frozen=True)
class PartitionClaim:
    """A partition as this instance claimed it: where to start, and the epoch that its
    write transactions must still find."""

    next_offset: int | None
    epoch: int


class OffsetsTable:
    """The offsets of ``group_id`` in ``table`` (a plain or schema-qualified name)."""

    def __init__(self, table: str, group_id: str) -> None:
        self.table, self.group_id = table, group_id
        self._sql = table_name(table)  # in statements: quoted (see ``_sql``)

    async def ensure(self, conn: Any) -> None:
        """Create the table if it is missing, then check its columns: a table of another
        shape is one ``ConfigError`` naming what differs. Instances starting together
        take turns (an advisory lock on the table's name, held to the COMMIT): two
        concurrent ``CREATE TABLE IF NOT EXISTS`` can both find it missing, and the
        second then fails on PostgreSQL's catalog (a unique violation on ``pg_type``)."""
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", self.table)
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._sql} ("
                " group_id text NOT NULL, topic text NOT NULL, partition integer NOT NULL,"
                " next_offset bigint, epoch bigint NOT NULL,"
                " PRIMARY KEY (group_id, topic, partition))"
            )
        rows = await conn.fetch(
            "SELECT attname, format_type(atttypid, atttypmod) AS type FROM pg_attribute"
            " WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped",
            self._sql,
        )
        found = {r["attname"]: r["type"] for r in rows}
        wrong = [f"{c} {t}" for c, t in _COLUMNS.items() if found.get(c) != t]
        if wrong:
            raise ConfigError(
                f"table {self.table} is not eosflow's offsets table: it needs columns "
                f"{', '.join(wrong)} (found {', '.join(f'{c} {t}' for c, t in found.items())})"
            )

    async def claim(
        self, conn: Any, starts: Mapping[Partition, int]
    ) -> dict[Partition, PartitionClaim]:
        """Raise each partition's epoch and return where it stands; one never written
        starts at ``starts`` (its log's start or end, per the reset policy), stored now,
        so its position is an offset from here on. Waits for a write transaction of
        another instance holding a row."""
        tps = sorted(starts)
        rows = await conn.fetch(
            f"INSERT INTO {self._sql} AS o (group_id, topic, partition, next_offset, epoch)"
            " SELECT $1, t, p, n, 1"
            " FROM unnest($2::text[], $3::integer[], $4::bigint[]) AS u(t, p, n)"
            " ON CONFLICT (group_id, topic, partition) DO UPDATE"
            " SET epoch = o.epoch + 1, next_offset = coalesce(o.next_offset, excluded.next_offset)"
            " RETURNING topic, partition, next_offset, epoch",
            self.group_id,
            [t for t, _ in tps],
            [p for _, p in tps],
            [starts[tp] for tp in tps],
        )
        return {
            (r["topic"], r["partition"]): PartitionClaim(r["next_offset"], r["epoch"]) for r in rows
        }

    async def check(self, conn: Any, held: Mapping[Partition, PartitionClaim]) -> None:
        """Inside a write transaction, before anything is written: lock the rows of
        ``held`` (what this instance claimed, with the offsets it has written up to)
        and raise ``PartitionLost`` if an epoch or an offset moved."""
        tps = sorted(held)
        rows = await conn.fetch(
            f"SELECT topic, partition, next_offset, epoch FROM {self._sql}"
            " WHERE group_id = $1 AND (topic, partition) IN"
            " (SELECT * FROM unnest($2::text[], $3::integer[]))"
            " ORDER BY topic, partition FOR UPDATE",
            self.group_id,
            [t for t, _ in tps],
            [p for _, p in tps],
        )
        now = {
            (r["topic"], r["partition"]): PartitionClaim(r["next_offset"], r["epoch"]) for r in rows
        }
        lost = [tp for tp in tps if tp not in now or now[tp].epoch != held[tp].epoch]
        moved = {tp: now[tp] for tp in tps if tp not in lost and now[tp] != held[tp]}
        if lost or moved:
            raise PartitionLost(lost, moved)

    async def advance(self, conn: Any, offsets: Mapping[Partition, int]) -> None:
        """Inside the write transaction, after ``check``: the next offsets written."""
        tps = sorted(offsets)
        await conn.execute(
            f"UPDATE {self._sql} AS o SET next_offset = u.n"
            " FROM unnest($2::text[], $3::integer[], $4::bigint[]) AS u(t, p, n)"
            " WHERE o.group_id = $1 AND o.topic = u.t AND o.partition = u.p",
            self.group_id,
            [t for t, _ in tps],
            [p for _, p in tps],
            [offsets[tp] for tp in tps],
        )

    async def read(
        self, conn: Any, partitions: Iterable[Partition]
    ) -> dict[Partition, PartitionClaim]:
        """Where ``partitions`` stand now (after a failure whose outcome is unknown)."""
        tps = sorted(partitions)
        rows = await conn.fetch(
            f"SELECT topic, partition, next_offset, epoch FROM {self._sql}"
            " WHERE group_id = $1 AND (topic, partition) IN"
            " (SELECT * FROM unnest($2::text[], $3::integer[]))",
            self.group_id,
            [t for t, _ in tps],
            [p for _, p in tps],
        )
        return {
            (r["topic"], r["partition"]): PartitionClaim(r["next_offset"], r["epoch"]) for r in rows
        }
