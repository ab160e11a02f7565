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
from eosflow._servers import Postgres
from eosflow.testing import FakeCluster

TABLES = """
CREATE TABLE events (at timestamptz, amount numeric, who text, tags jsonb);
CREATE TABLE accounts (id text PRIMARY KEY, balance numeric, note text);
CREATE TABLE pairs (a int, b int, v text, PRIMARY KEY (a, b));
CREATE TABLE loose (v text);
CREATE TABLE "order" (seq serial, amount numeric, v text, w text);
CREATE TABLE devices (id uuid PRIMARY KEY, n int, note text);
CREATE TABLE prices (id numeric PRIMARY KEY, n int);
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


# Numbers go in as they were written, never through a Python float; rows go in in the
# order of the log even as their columns change; a table named by a reserved word works
# (the offsets table too). Mutations caught: JSON numbers read as floats -- 28 digits
# cut to 17, 0.1 + 0.2 style noise; rows grouped by their columns -- the order v, v, w;
# table names unquoted -- a syntax error at "order", the app stops.
async def test_numbers_order_and_names_as_written(cluster: FakeCluster, postgres: Postgres) -> None:
    c = cluster
    c.create_topic("in", 1)
    exact = "12345678901234567890.12345678"
    await send(
        c.bootstrap_servers,
        "in",
        [
            (None, f'{{"amount": {exact}, "v": "a"}}'),
            (None, '{"amount": 1e-7, "w": "b"}'),
            (None, '{"amount": 123456789012345678901234567890, "v": "c"}'),
        ],
    )

    class Orders(eosflow.PostgresSink):
        into = "order"
        offsets_table = "offset"

    async with eosflow.EosApp(Orders(postgres.dsn), app_config(c)):

        async def done() -> bool:
            return len(await fetch(postgres, 'SELECT 1 FROM "order"')) == 3

        await eventually(done, what="the input written")
    found = await fetch(postgres, 'SELECT amount::text, coalesce(v, w) FROM "order" ORDER BY seq')
    assert found == [(exact, "a"), ("0.0000001", "b"), ("123456789012345678901234567890", "c")]
    assert await fetch(postgres, 'SELECT next_offset FROM "offset"') == [(3,)]


# Which records share a key is PostgreSQL's say: a uuid in upper and in lower case, and
# 1 and 1.0 in a numeric, are one key -- merged in the batch, and deleted by a tombstone
# spelled either way. A key that matches a column only in case stops the app naming it.
# Mutations caught: keys merged as Python compares them -- one batch upserts the same row twice
# (PostgreSQL refuses, the app stops); the delete comparing text -- the tombstone in
# upper case deleted nothing; the case check left out -- "N" ignored, the app ran on;
# the key's spelling taken from the last record -- the row's id 1.0 (a review's).
async def test_keys_are_compared_as_postgres_does(cluster: FakeCluster, postgres: Postgres) -> None:
    c = cluster
    c.create_topic("in", 1)
    upper, other = "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "B0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"
    await send(
        c.bootstrap_servers,
        "in",
        [
            (upper, {"id": upper, "n": 1, "note": "kept"}),
            (upper.lower(), {"id": upper.lower(), "n": 2}),
            (other.lower(), {"id": other.lower()}),
        ],
    )

    class Devices(eosflow.PostgresSink):
        into = "devices"
        upsert = True

    class Prices(eosflow.PostgresSink):
        into = "prices"
        upsert = True
        offsets_table = "price_offsets"

    async with eosflow.EosApp(Devices(postgres.dsn), app_config(c, max_records_per_txn=1000)):
        await eventually(lambda: at_end(postgres, 3), what="the first batch")
        await send(c.bootstrap_servers, "in", [(other, None)])  # the stored row: lower case
        await eventually(lambda: at_end(postgres, 4), what="the tombstone")
    assert await fetch(postgres, "SELECT id::text, n, note FROM devices") == [
        (upper.lower(), 2, "kept")
    ]
    c.create_topic("prices", 1)
    await send(
        c.bootstrap_servers,
        "prices",
        [("1", '{"id": 1, "n": 1}'), ("1.0", '{"id": 1.0, "n": 2}'), ("2", '{"id": 2, "N": 3}')],
    )
    config = app_config(c, input_topics=("prices",), max_records_per_txn=2)
    with pytest.raises(eosflow.FatalError, match="'N' names no column") as caught:
        await asyncio.wait_for(eosflow.EosApp(Prices(postgres.dsn), config).run(), 60)
    assert "prices[0]@2" in str(caught.value)
    # one key, merged; its key as first written, as ON CONFLICT keeps a stored row's
    assert await fetch(postgres, "SELECT id::text, n FROM prices") == [("1", 2)]
