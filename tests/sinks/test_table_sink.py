"""``PostgresSink`` with ``into``: each record's JSON value a row, inserted or upserted,
a tombstone deleting (``eosflow/sinks/_tables.py``), on a real PostgreSQL. Each test
says the mutation it catches."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer
from kit import app_config, eventually

import eosflow
from eosflow.testing import FakeCluster
from eosflow.testing._postgres import Postgres

TABLES = """
CREATE TABLE events (at timestamptz, amount numeric, who text, tags jsonb);
CREATE TABLE accounts (id text PRIMARY KEY, balance numeric, note text);
CREATE TABLE pairs (a int, b int, v text, PRIMARY KEY (a, b));
CREATE TABLE loose (v text);
"""


@pytest.fixture
async def postgres() -> AsyncIterator[Postgres]:
    async with Postgres() as pg:
        conn = await asyncpg.connect(pg.dsn)
        await conn.execute(TABLES)
        await conn.close()
        yield pg


async def send(bootstrap: str, topic: str, records: list[tuple[str | None, Any]]) -> None:
    """(key, value) pairs in order to partition 0; a value None is a tombstone, a str
    is sent as it is, anything else as JSON."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        for key, value in records:
            raw = value.encode() if isinstance(value, str) else json.dumps(value).encode()
            await p.send_and_wait(
                topic,
                None if value is None else raw,
                key=None if key is None else key.encode(),
                partition=0,
            )
    finally:
        await p.stop()


async def fetch(pg: Postgres, sql: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(pg.dsn)
    try:
        return [tuple(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


async def at_end(pg: Postgres, n: int) -> bool:
    try:
        got = await fetch(pg, "SELECT next_offset FROM eosflow_offsets WHERE group_id = 'g'")
    except asyncpg.UndefinedTableError:  # not made yet
        return False
    return got == [(n,)]


class Events(eosflow.PostgresSink):
    into = "events"


class Accounts(eosflow.PostgresSink):
    into = "accounts"
    upsert = True


# Insert: PostgreSQL's JSON conversion gives each column its type, a key naming no column
# is ignored, a missing one is NULL, a tombstone is skipped.
async def test_values_are_inserted_as_rows(cluster: FakeCluster, postgres: Postgres) -> None:
    c = cluster
    c.create_topic("in", 1)
    await send(
        c.bootstrap_servers,
        "in",
        [
            (None, {"at": "2026-11-28T10:00:00Z", "amount": 12.5, "who": "ann", "x": 1}),
            (None, {"amount": "3", "tags": {"vip": True}}),
            ("k", None),
            (None, {"at": "2026-11-28T11:30:00+01:00", "who": "bob"}),
        ],
    )
    async with eosflow.EosApp(Events(postgres.dsn), app_config(c)):
        await eventually(lambda: at_end(postgres, 4), what="the input written")
    found = await fetch(
        postgres,
        "SELECT to_char(at AT TIME ZONE 'UTC', 'HH24:MI'), amount::text, who, tags::text"
        " FROM events ORDER BY who NULLS LAST",
    )
    assert found == [
        ("10:00", "12.5", "ann", None),
        ("10:30", None, "bob", None),
        (None, "3", None, '{"vip": true}'),
    ]


# Upsert: a record writes the columns it names into its key's row, a tombstone deletes
# it, and the result does not depend on batching -- one batch holds a key three times
# (the input is all there before the app starts), the next batches write over it.
# Mutations caught: a key's records in a batch not merged (each one its own row in the
# statement) -- PostgreSQL refuses ("ON CONFLICT DO UPDATE command cannot affect row a
# second time"), the app stops; the last one kept instead of merged -- a's note lost;
# an upsert after a tombstone in the batch cancelling the delete -- a's note kept.
async def test_upserts_merge_per_key_and_tombstones_delete(
    cluster: FakeCluster, postgres: Postgres
) -> None:
    c = cluster
    c.create_topic("in", 1)
    first: list[tuple[str | None, Any]] = [
        ("a", {"id": "a", "balance": 1, "note": "first"}),
        ("b", {"id": "b", "balance": 10}),
        ("a", {"id": "a", "balance": 2}),
        ("c", {"id": "c", "balance": 7}),
        ("a", {"id": "a", "balance": 3}),
        ("c", None),
        ("d", {"id": "d", "balance": 4, "note": "gone"}),
        ("d", None),
        ("d", {"id": "d", "balance": 5}),
    ]
    await send(c.bootstrap_servers, "in", first)
    app = eosflow.EosApp(Accounts(postgres.dsn), app_config(c, max_records_per_txn=1000))
    sql = "SELECT id, balance::int, note FROM accounts ORDER BY id"
    async with app:
        await eventually(lambda: at_end(postgres, len(first)), what="the first batch")
        assert app.stats.committed == 1  # one batch: the keys met within it
        assert await fetch(postgres, sql) == [("a", 3, "first"), ("b", 10, None), ("d", 5, None)]
        await send(c.bootstrap_servers, "in", [("b", None), ("a", {"id": "a", "balance": 9})])
        await eventually(lambda: at_end(postgres, len(first) + 2), what="the second batch")
        assert await fetch(postgres, sql) == [("a", 9, "first"), ("d", 5, None)]
        await send(c.bootstrap_servers, "in", [("a", None), ("a", {"id": "a", "balance": 11})])
        await eventually(lambda: at_end(postgres, len(first) + 4), what="the third batch")
    assert await fetch(postgres, sql) == [("a", 11, None), ("d", 5, None)]


# Mistakes are one line: at start (no table, no primary key for an upsert, write() and
# into both or neither, a name that is no table name), and a record that is not a JSON
# object stops the app naming it (FatalError) -- writing past it would lose it.
async def test_table_mistakes_are_one_line(cluster: FakeCluster, postgres: Postgres) -> None:
    c = cluster
    c.create_topic("in", 1)
    await send(c.bootstrap_servers, "in", [(None, {"v": "x"}), (None, "not json")])

    async def fails(
        sink: eosflow.PostgresSink, error: type[Exception] = eosflow.ConfigError
    ) -> str:
        with pytest.raises(error) as caught:
            await asyncio.wait_for(eosflow.EosApp(sink, app_config(c)).run(), 60)
        message = str(caught.value)
        assert "\n" not in message
        return message

    class Nowhere(eosflow.PostgresSink):
        into = "nowhere"

    class NoKey(eosflow.PostgresSink):
        into = "loose"
        upsert = True

    class Both(Events):
        async def write(self, conn: Any, records: Any) -> None: ...

    class Odd(eosflow.PostgresSink):
        into = "events; DROP TABLE events"

    class Loose(eosflow.PostgresSink):
        into = "loose"

    assert "nowhere" in await fails(Nowhere(postgres.dsn))
    assert "primary key on loose" in await fails(NoKey(postgres.dsn))
    assert "both are set" in await fails(Both(postgres.dsn))
    assert "override write() or set into" in await fails(eosflow.PostgresSink(postgres.dsn))
    assert "not a table name" in await fails(Odd(postgres.dsn))
    message = await fails(Loose(postgres.dsn), eosflow.FatalError)
    assert "in[0]@1" in message and "not JSON" in message
    assert await fetch(postgres, "SELECT v FROM loose") == []  # its batch wrote nothing


# A composite primary key: upserts work on it; a tombstone cannot say which row and
# stops the app.
async def test_a_composite_key_upserts(cluster: FakeCluster, postgres: Postgres) -> None:
    c = cluster
    c.create_topic("in", 1)

    class Pairs(eosflow.PostgresSink):
        into = "pairs"
        upsert = True

    await send(
        c.bootstrap_servers,
        "in",
        [
            (None, {"a": 1, "b": 1, "v": "x"}),
            (None, {"a": 1, "b": 2, "v": "y"}),
            (None, {"a": 1, "b": 1, "v": "z"}),
        ],
    )
    async with eosflow.EosApp(Pairs(postgres.dsn), app_config(c)):
        await eventually(lambda: at_end(postgres, 3), what="the input written")
    assert await fetch(postgres, "SELECT a, b, v FROM pairs ORDER BY a, b") == [
        (1, 1, "z"),
        (1, 2, "y"),
    ]
    await send(c.bootstrap_servers, "in", [("1", None)])
    with pytest.raises(eosflow.FatalError, match="2 columns"):
        await asyncio.wait_for(eosflow.EosApp(Pairs(postgres.dsn), app_config(c)).run(), 60)
