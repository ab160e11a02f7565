"""Tables whose rows are kept in a genuine schema registry (Apicurio, started by the test
kit): ``eosflow.Table(topic, serde=eosflow.Avro(M))``. The rows are written by
confluent-kafka's own ``AvroSerializer`` in versions of the subject's schema (a schema id
each), and a row is read where the registry cannot be awaited (``process``, a wall-clock
timer's ``fire``): a row naming an id not fetched yet starts the fetch and aborts its
transaction, which is redone once the schema is there -- after a restart too, when the
rows come from the local copy and the new process has fetched nothing. ``GET
/state/<table>/<key>`` fetches a schema no record read before. A registry that does not
answer stops the app, dead-letter topic or not. The comment above each test names the
mutation it caught."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kit import T0_MS, create_topic, eventually, state_value
from pydantic import BaseModel
from stateful import state_config

import eosflow
from eosflow._checks._checker import read_records
from eosflow.testing._ladder import Broker

pytestmark = pytest.mark.genuine


class Customer(BaseModel):
    id: str
    name: str


def _schema(*extra: dict[str, Any]) -> str:
    base = [{"name": "id", "type": "string"}, {"name": "name", "type": "string"}]
    return json.dumps({"type": "record", "name": "Customer", "fields": [*base, *extra]})


# Three versions of the subject's schema, each adding a field with a default (BACKWARD
# compatible); the reader's (derived from Customer) has neither added field.
V1 = _schema()
V2 = _schema({"name": "tier", "type": "string", "default": "basic"})
V3 = _schema(
    {"name": "tier", "type": "string", "default": "basic"},
    {"name": "since", "type": "int", "default": 0},
)


async def produce(bootstrap: str, topic: str, events: list[tuple[bytes, int, bytes]]) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        for key, t, value in events:
            await p.send(topic, value, key=key, partition=0, timestamp_ms=t)
        await p.flush()
    finally:
        await p.stop()


def enrich(
    table: eosflow.Table | eosflow.GlobalTable, out: str, registry: str
) -> eosflow.Processor:
    class Enrich(eosflow.Processor):
        tables = {"customers": table}
        schema_registry = eosflow.SchemaRegistrySettings(url=registry)

        async def process(self, record: eosflow.Record) -> eosflow.Output:
            assert record.key is not None and record.value is not None
            row: Customer | None = self.table("customers").get(record.key)
            name = "-" if row is None else row.name
            return eosflow.Output(out, record.value + b":" + name.encode(), key=record.key)

    return Enrich()


async def run_until(app: eosflow.EosApp, b: Broker, out: str, n: int) -> None:
    async def done() -> bool:
        assert app.failure is None, app.failure
        return len(await read_records(b.bootstrap_servers, out)) >= n

    await eventually(done, timeout_s=90, what=f"{n} outputs committed")


# Orders join rows written in two schema versions; a restart (the table from its local
# copy, nothing fetched in the new process) goes on; the operations port answers a row
# of a third version that no order read. Every order once, with its row's name.
# Caught: the row's NeedsSchema not turned into a fetch and a redo (the app stopped:
# ProcessingError naming the first order); the query not fetching (500, NeedsSchema);
# the redo taken as a processor's retry (the next transactions held half as many).
async def test_a_tables_rows_are_read_in_their_writers_schemas_across_a_restart(
    eosflow_broker: Broker,
    eosflow_schema_registry: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    b, url = eosflow_broker, eosflow_schema_registry.url
    orders, customers, out = b.unique("orders"), b.unique("customers"), b.unique("out")
    for topic in (orders, customers, out):
        await create_topic(b.bootstrap_servers, topic, 1)
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext(customers, MessageField.VALUE)
    v1, v2, v3 = (AvroSerializer(client, s) for s in (V1, V2, V3))
    rows = [
        (b"c0", T0_MS, v1({"id": "c0", "name": "Ada"}, ctx)),
        (b"c1", T0_MS + 1, v2({"id": "c1", "name": "Bo", "tier": "gold"}, ctx)),
        (b"c9", T0_MS + 2, v3({"id": "c9", "name": "Cy", "tier": "x", "since": 3}, ctx)),
    ]
    ids = {value[1:5] for _k, _t, value in rows}
    assert len(ids) == 3, "three versions, three schema ids"
    await produce(b.bootstrap_servers, customers, rows)

    def batch(first: int, n: int) -> list[tuple[bytes, int, bytes]]:
        keys = (b"c0", b"c1", b"c5")  # c5 has no row
        return [(keys[i % 3], T0_MS + 100 + i, f"o{i}".encode()) for i in range(first, first + n)]

    await produce(b.bootstrap_servers, orders, batch(0, 30))
    ops = {"metrics_port": 0, "progress_interval_s": 0}
    cfg = state_config(
        b.bootstrap_servers, b.unique("g"), orders, b.unique("tx"), tmp_path, ops=ops
    )
    table = eosflow.Table(customers, serde=eosflow.Avro(Customer))
    app = eosflow.EosApp(enrich(table, out, url), cfg)
    async with app:
        await run_until(app, b, out, 30)
        assert app.stats.aborted == 2, "each of the two ids met aborts once"
        assert await state_value(app, "customers", "c9") == {"id": "c9", "name": "Cy"}

    await produce(b.bootstrap_servers, orders, batch(30, 30))
    again = eosflow.EosApp(enrich(table, out, url), cfg)
    async with again:
        await run_until(again, b, out, 60)
        assert again.stats.aborted == 2, "the new process fetches the two ids afresh"

    got = [r.value for r in await read_records(b.bootstrap_servers, out)]
    names = {0: b"Ada", 1: b"Bo", 2: b"-"}
    assert sorted(got) == sorted(f"o{i}".encode() + b":" + names[i % 3] for i in range(60))
    shrunk = [r.message for r in caplog.records if "retrying with at most" in r.message]
    assert not shrunk, shrunk


# The same with a global table (rows read whole by the instance, not by the group).
# Caught: as above, the rows' codec not wrapped.
async def test_a_global_tables_rows_are_read_in_their_writers_schemas(
    eosflow_broker: Broker, eosflow_schema_registry: Any, tmp_path: Path
) -> None:
    b, url = eosflow_broker, eosflow_schema_registry.url
    keys = tuple((b"c0", b"c1", b"c5")[i % 3] for i in range(30))
    orders, customers, out, _dlq = await _customers_and_orders(b, url, keys)
    cfg = state_config(b.bootstrap_servers, b.unique("g"), orders, b.unique("tx"), tmp_path)
    table = eosflow.GlobalTable(customers, serde=eosflow.Avro(Customer))
    app = eosflow.EosApp(enrich(table, out, url), cfg)
    async with app:
        await run_until(app, b, out, 30)
        assert app.stats.aborted == 2, "each of the two ids met aborts once"
    got = [r.value for r in await read_records(b.bootstrap_servers, out)]
    names = {0: b"Ada", 1: b"Bo", 2: b"-"}
    assert sorted(got) == sorted(f"o{i}".encode() + b":" + names[i % 3] for i in range(30))


class Remind(eosflow.Processor):
    """Each order sets a wall-clock timer; its ``fire`` reads the customer's row."""

    def __init__(self, customers: str, out: str, registry: str) -> None:
        self.tables = {"customers": eosflow.Table(customers, serde=eosflow.Avro(Customer))}
        self.schema_registry = eosflow.SchemaRegistrySettings(url=registry)
        self.out = out

    async def process(self, record: eosflow.Record) -> None:
        assert record.key is not None and record.value is not None
        self.timers.after(0.05, record.key, record.value)

    async def fire(self, timer: eosflow.Timer) -> eosflow.Output:
        row: Customer | None = self.table("customers").get(timer.key)
        name = b"-" if row is None else row.name.encode()
        return eosflow.Output(self.out, timer.payload + b":" + name, key=timer.key)


async def _customers_and_orders(b: Broker, url: str, keys: tuple[bytes, ...]) -> tuple[str, ...]:
    """Topics of this test: orders (one per key of ``keys``), customers c0 (V1) and c1
    (V2) written through the registry at ``url``, the output and a dead-letter topic."""
    orders, customers = b.unique("orders"), b.unique("customers")
    out, dlq = b.unique("out"), b.unique("dlq")
    for topic in (orders, customers, out, dlq):
        await create_topic(b.bootstrap_servers, topic, 1)
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext(customers, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, V1), AvroSerializer(client, V2)
    rows = [
        (b"c0", T0_MS, v1({"id": "c0", "name": "Ada"}, ctx)),
        (b"c1", T0_MS + 1, v2({"id": "c1", "name": "Bo", "tier": "gold"}, ctx)),
    ]
    await produce(b.bootstrap_servers, customers, rows)
    events = [(k, T0_MS + 100 + i, b"o%d" % i) for i, k in enumerate(keys)]
    await produce(b.bootstrap_servers, orders, events)
    return orders, customers, out, dlq


# A wall-clock timer's fire reads rows of both ids: its transaction is redone until the
# schemas are there, each timer fires once. Caught: the rows' codec raising
# NeedsSchema (the fire failed: ProcessingError).
async def test_a_wall_clock_timer_reads_a_tables_row_in_a_schema_not_fetched_yet(
    eosflow_broker: Broker, eosflow_schema_registry: Any, tmp_path: Path
) -> None:
    b, url = eosflow_broker, eosflow_schema_registry.url
    orders, customers, out, _dlq = await _customers_and_orders(b, url, (b"c0", b"c1", b"c5"))
    cfg = state_config(b.bootstrap_servers, b.unique("g"), orders, b.unique("tx"), tmp_path)
    app = eosflow.EosApp(Remind(customers, out, url), cfg)
    async with app:
        await run_until(app, b, out, 3)
        assert app.stats.aborted >= 1, "a row's schema met first aborts and redoes"
    got = sorted(r.value for r in await read_records(b.bootstrap_servers, out))
    assert got == [b"o0:Ada", b"o1:Bo", b"o2:-"]


# The app's registry does not answer (a port nothing listens on): once its retries run
# out, the app stops with SchemaRegistryError -- the record is fine, so it is not
# dead-lettered -- and nothing is committed. Caught: a FatalError from process taken as
# the record's failure (the order dead-lettered, the app going on).
async def test_an_unreachable_registry_stops_the_app_even_with_a_dead_letter_topic(
    eosflow_broker: Broker, eosflow_schema_registry: Any, tmp_path: Path
) -> None:
    b, url = eosflow_broker, eosflow_schema_registry.url
    orders, customers, out, dlq = await _customers_and_orders(b, url, (b"c0",))
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    table = eosflow.Table(customers, serde=eosflow.Avro(Customer))
    proc = enrich(table, out, dead)
    proc.schema_registry = eosflow.SchemaRegistrySettings(url=dead, retry_timeout_s=1.0)
    group = b.unique("g")
    cfg = state_config(
        b.bootstrap_servers, group, orders, b.unique("tx"), tmp_path, dead_letter_topic=dlq
    )
    app = eosflow.EosApp(proc, cfg)

    async def stopped() -> bool:
        return app.failure is not None

    with pytest.raises(eosflow.SchemaRegistryError, match=dead):
        async with app:
            await eventually(stopped, timeout_s=60, what="the stop")
    assert await read_records(b.bootstrap_servers, dlq) == []
    assert await read_records(b.bootstrap_servers, out) == []
