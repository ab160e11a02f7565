"""Tables whose rows are kept in a genuine schema registry (Apicurio, started by the test
kit): ``eosflow.Table(topic, serde=eosflow.Avro(M))``. The rows are written by
confluent-kafka's own ``AvroSerializer`` in two versions of the subject's schema (two
schema ids), and a table row is read inside ``process``, where the registry cannot be
awaited: a row naming an id not fetched yet aborts its transaction, the schema is
fetched, and the transaction is redone -- after a restart too, when the rows come from
the local copy and the new process has fetched nothing. ``GET /state/<table>/<key>``
fetches a schema no record read before. The comment above each test names the mutation
it caught."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kit import T0_MS, create_topic, eventually
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


def get(port: int, path: str) -> tuple[int, str]:
    """GET ``path`` on the app's operations port (blocking: call it in a thread)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


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
        assert app.stats.aborted >= 1, "a row's schema met first aborts and redoes"
        port = app.ops.port
        assert port is not None
        status, body = await asyncio.to_thread(get, port, "/state/customers/c9")
        assert status == 200, body
        assert json.loads(body)["values"][0]["value"] == {"id": "c9", "name": "Cy"}

    await produce(b.bootstrap_servers, orders, batch(30, 30))
    again = eosflow.EosApp(enrich(table, out, url), cfg)
    async with again:
        await run_until(again, b, out, 60)
        assert again.stats.aborted >= 1, "the new process fetched the ids afresh"

    got = [r.value for r in await read_records(b.bootstrap_servers, out)]
    names = {0: b"Ada", 1: b"Bo", 2: b"-"}
    assert sorted(got) == sorted(f"o{i}".encode() + b":" + names[i % 3] for i in range(60))
    shrunk = [r.message for r in caplog.records if "retrying with at most" in r.message]
    assert not shrunk, shrunk


# The same with a global table (rows read whole by the instance, not by the group).
# Caught: as above, the row's NeedsSchema handed to the error policy.
async def test_a_global_tables_rows_are_read_in_their_writers_schemas(
    eosflow_broker: Broker, eosflow_schema_registry: Any, tmp_path: Path
) -> None:
    b, url = eosflow_broker, eosflow_schema_registry.url
    orders, customers, out = b.unique("orders"), b.unique("customers"), b.unique("out")
    for topic in (orders, customers, out):
        await create_topic(b.bootstrap_servers, topic, 1)
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext(customers, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, V1), AvroSerializer(client, V2)
    rows = [
        (b"c0", T0_MS, v1({"id": "c0", "name": "Ada"}, ctx)),
        (b"c1", T0_MS + 1, v2({"id": "c1", "name": "Bo", "tier": "gold"}, ctx)),
    ]
    await produce(b.bootstrap_servers, customers, rows)
    keys = (b"c0", b"c1", b"c5")
    events = [(keys[i % 3], T0_MS + 100 + i, f"o{i}".encode()) for i in range(30)]
    await produce(b.bootstrap_servers, orders, events)
    cfg = state_config(b.bootstrap_servers, b.unique("g"), orders, b.unique("tx"), tmp_path)
    table = eosflow.GlobalTable(customers, serde=eosflow.Avro(Customer))
    app = eosflow.EosApp(enrich(table, out, url), cfg)
    async with app:
        await run_until(app, b, out, 30)
        assert app.stats.aborted >= 1, "a row's schema met first aborts and redoes"
    got = [r.value for r in await read_records(b.bootstrap_servers, out)]
    names = {0: b"Ada", 1: b"Bo", 2: b"-"}
    assert sorted(got) == sorted(f"o{i}".encode() + b":" + names[i % 3] for i in range(30))
