"""What the PostgreSQL sink's tests share (``tests/sinks/``): a test PostgreSQL with the
``rows`` table -- **without** a unique constraint, so a duplicate would show -- the
``Rows`` sink that fills it by COPY, seeding, and the checks: every record once, the
positions in the database at the input's end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer
from kit import eventually

import eosflow
from eosflow._servers import Postgres

N, PARTS = 600, 3


@contextlib.asynccontextmanager
async def rows_database() -> AsyncIterator[Postgres]:
    """A test PostgreSQL holding an empty ``rows`` table."""
    async with Postgres() as pg:
        conn = await asyncpg.connect(pg.dsn)
        await conn.execute(
            "CREATE TABLE rows (topic text, partition int, off bigint, key text, value text)"
        )
        await conn.close()
        yield pg


async def seed(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    """``n`` records, record i to partition i % partitions."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        sent = [
            await p.send(topic, f"v{i}".encode(), key=str(i).encode(), partition=i % partitions)
            for i in range(n)
        ]
        await asyncio.gather(*sent)
    finally:
        await p.stop()


class Rows(eosflow.PostgresSink):
    """Each record as a row, by COPY."""

    async def write(self, conn: Any, records: Sequence[eosflow.Record]) -> None:
        await conn.copy_records_to_table(
            "rows",
            records=[
                (r.topic, r.partition, r.offset, (r.key or b"").decode(), (r.value or b"").decode())
                for r in records
            ],
            columns=["topic", "partition", "off", "key", "value"],
        )


async def rows(pg: Postgres) -> list[tuple[str, int, int]]:
    conn = await asyncpg.connect(pg.dsn)
    try:
        found = await conn.fetch("SELECT topic, partition, off FROM rows ORDER BY 1, 2, 3")
        return [(r["topic"], r["partition"], r["off"]) for r in found]
    finally:
        await conn.close()


async def positions(pg: Postgres, group: str) -> dict[tuple[str, int], int | None]:
    conn = await asyncpg.connect(pg.dsn)
    try:
        found = await conn.fetch(
            "SELECT topic, partition, next_offset FROM eosflow_offsets WHERE group_id = $1", group
        )
        return {(r["topic"], r["partition"]): r["next_offset"] for r in found}
    finally:
        await conn.close()


def exactly_once(found: list[tuple[str, int, int]], topic: str, n: int = N) -> None:
    expected = sorted((topic, i % PARTS, i // PARTS) for i in range(n))
    assert len(found) == len(set(found)), f"duplicates: {len(found) - len(set(found))}"
    assert found == expected, f"{len(found)} rows, {n} expected"


async def written(pg: Postgres, n: int = N) -> None:
    async def enough() -> bool:
        return len(await rows(pg)) >= n

    await eventually(enough, timeout_s=40, what=f"{n} rows written")


async def at_the_end(pg: Postgres, n: int, topic: str = "in", group: str = "g") -> None:
    """``n`` rows written and the group's positions at the end of ``n`` seeded records."""
    await written(pg, n)
    want = {(topic, p): n // PARTS for p in range(PARTS)}

    async def there() -> bool:
        return await positions(pg, group) == want

    await eventually(there, what="positions at the end")
