"""Typed records through a genuine schema registry (Apicurio Registry, started by the
test kit) and Kafka from the ladder: records written by confluent-kafka's own
serializers and registry client are read by eosflow, and eosflow's outputs are read by
confluent-kafka's deserializers -- Avro and JSON Schema, the Confluent wire format both
ways; a writer's schema resolved into the reader's; a record without the wire format
dead-lettered in the same transaction; an incompatible output schema refused at start
in one line naming its subject; a schema id fetched once however many records name it.
The comment above each test names the mutation it caught."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kit import create_topic, demo, eventually, ladder_config
from pydantic import BaseModel

import eosflow
from eosflow._checks._checker import read_records
from eosflow._typed import Typing
from eosflow.testing._ladder import Broker

pytestmark = pytest.mark.genuine

N = 30


class Order(BaseModel):
    id: int
    customer: str
    qty: int


class Total(BaseModel):
    id: int
    customer: str
    doubled: int


# The writer's schema has a field the reader's (derived from Order) has not: Avro's
# resolution skips it.
WRITER_AVRO = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": "string"},
            {"name": "note", "type": "string", "default": ""},
            {"name": "qty", "type": "int"},
        ],
    }
)


def orders() -> list[dict[str, Any]]:
    return [{"id": i, "customer": f"c{i % 3}", "note": "x" * i, "qty": i} for i in range(N)]


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        for i, v in enumerate(values):
            await p.send_and_wait(topic, v, key=f"c{i % 3}".encode(), partition=0)
    finally:
        await p.stop()


async def run_until_done(app: eosflow.EosApp, n: int) -> None:
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return app.stats.records >= n and app.last_outcome is eosflow.Outcome.COMMITTED

        await eventually(done, timeout_s=60, what=f"{n} records processed and committed")


def doubler(src: str, dst: str, declare: Any, registry: str) -> eosflow.Processor:
    class Doubler(eosflow.Processor):
        topics = {
            src: eosflow.Topic(key=str, value=declare(Order)),
            dst: eosflow.Topic(key=str, value=declare(Total)),
        }
        schema_registry = eosflow.SchemaRegistrySettings(url=registry)

        async def process(self, record: eosflow.Record[str, Order]) -> eosflow.Output:
            o = record.value
            assert o is not None
            return eosflow.Output(
                dst, Total(id=o.id, customer=o.customer, doubled=2 * o.qty), key=record.key
            )

    return Doubler()


# Avro both ways (the writer's schema, with a field Order has not, resolved into the one
# derived from Order), and a record that is not in the wire format dead-lettered as
# written. Caught: the magic byte not checked (the bad record read as schema id
# 1869881441, which the registry does not know: dead-lettered for the wrong reason).
async def test_avro_written_by_confluent_is_read_and_eosflows_avro_is_read_by_confluent(
    eosflow_broker: Broker, eosflow_schema_registry: Any
) -> None:
    b, url = eosflow_broker, eosflow_schema_registry.url
    src, dst, dlq = b.unique("orders"), b.unique("totals"), b.unique("dlq")
    for topic in (src, dst, dlq):
        await create_topic(b.bootstrap_servers, topic, 1)
    client = SchemaRegistryClient({"url": url})
    write = AvroSerializer(client, WRITER_AVRO)
    ctx = SerializationContext(src, MessageField.VALUE)
    values = [write(o, ctx) for o in orders()]
    values.insert(7, b"not avro at all")
    await produce(b.bootstrap_servers, src, values)

    app = eosflow.EosApp(
        doubler(src, dst, eosflow.Avro, url),
        ladder_config(b, src, b.unique("g"), dead_letter_topic=dlq),
    )
    await run_until_done(app, N + 1)

    read = AvroDeserializer(client)
    out_ctx = SerializationContext(dst, MessageField.VALUE)
    got = [read(r.value, out_ctx) for r in await read_records(b.bootstrap_servers, dst)]
    assert got == [{"id": i, "customer": f"c{i % 3}", "doubled": 2 * i} for i in range(N)]
    dead = await read_records(b.bootstrap_servers, dlq)
    assert [r.value for r in dead] == [b"not avro at all"]
    error = dict(dead[0].headers)["eosflow.error"].decode()
    assert "magic byte 110, not 0" in error, error
    assert app.stats.undecodable == 1
    registered = client.get_latest_version(f"{dst}-value")
    assert json.loads(registered.schema.schema_str)["name"] == "Total"


# JSON Schema both ways. Caught: the header left off eosflow's outputs (confluent's
# deserializer then refuses them).
async def test_json_schema_written_by_confluent_is_read_and_read_back_by_confluent(
    eosflow_broker: Broker, eosflow_schema_registry: Any
) -> None:
    b, url = eosflow_broker, eosflow_schema_registry.url
    src, dst = b.unique("orders"), b.unique("totals")
    for topic in (src, dst):
        await create_topic(b.bootstrap_servers, topic, 1)
    client = SchemaRegistryClient({"url": url})
    write = JSONSerializer(json.dumps(Order.model_json_schema()), client)
    ctx = SerializationContext(src, MessageField.VALUE)
    values = [write({k: v for k, v in o.items() if k != "note"}, ctx) for o in orders()]
    await produce(b.bootstrap_servers, src, values)

    app = eosflow.EosApp(
        doubler(src, dst, eosflow.JsonSchema, url), ladder_config(b, src, b.unique("g"))
    )
    await run_until_done(app, N)

    read = JSONDeserializer(json.dumps(Total.model_json_schema()), schema_registry_client=client)
    out_ctx = SerializationContext(dst, MessageField.VALUE)
    got = [read(r.value, out_ctx) for r in await read_records(b.bootstrap_servers, dst)]
    assert got == [{"id": i, "customer": f"c{i % 3}", "doubled": 2 * i} for i in range(N)]


# An output schema its subject's compatibility refuses stops the app before it joins
# the group, in one line naming the subject. Caught: the 409 mapped as any refusal (the
# line then lacks "incompatible" and the subject).
async def test_an_incompatible_output_schema_stops_the_app_at_start_naming_the_subject(
    eosflow_broker: Broker, eosflow_schema_registry: Any
) -> None:
    b, url = eosflow_broker, eosflow_schema_registry.url
    src, dst = b.unique("orders"), b.unique("totals")
    await create_topic(b.bootstrap_servers, src, 1)
    client = SchemaRegistryClient({"url": url})
    old = {"type": "record", "name": "Total", "fields": [{"name": "id", "type": "long"}]}
    client.register_schema(f"{dst}-value", _avro(old))  # Total adds fields without defaults

    app = eosflow.EosApp(doubler(src, dst, eosflow.Avro, url), ladder_config(b, src, b.unique("g")))
    with pytest.raises(eosflow.IncompatibleSchemaError) as caught:
        await asyncio.wait_for(app.run(), 60)
    assert caught.value.subject == f"{dst}-value"
    assert f"refused the schema of subject '{dst}-value' as incompatible" in str(caught.value)
    assert "\n" not in str(caught.value)


# A writer's schema is fetched once, whatever the number of records naming its id.
# Caught: the codec's reader of a fetched id not kept (fetched again for the next
# record, which then never decodes).
async def test_a_schema_id_is_fetched_once_for_all_its_records(
    eosflow_schema_registry: Any,
) -> None:
    url = eosflow_schema_registry.url
    client = SchemaRegistryClient({"url": url})
    topic = f"once-{id(client)}"
    write = AvroSerializer(client, WRITER_AVRO)
    ctx = SerializationContext(topic, MessageField.VALUE)
    settings = eosflow.SchemaRegistrySettings(url=url)
    typing = Typing(
        "Once", {topic: eosflow.Topic(value=eosflow.Avro(Order))}, (topic,), {}, settings
    )
    seen: list[Order] = []

    async def process(record: eosflow.Record) -> None:
        seen.append(record.value)  # type: ignore[arg-type]

    handle = typing.decoding(process)  # type: ignore[arg-type]
    try:
        await typing.prepare()
        for i, o in enumerate(orders()[:50]):
            await handle(eosflow.Record(topic, 0, i, None, write(o, ctx), (), 1))
        assert typing.registry is not None
        assert typing.registry.requests == 1
    finally:
        await typing.close()
    assert [o.qty for o in seen] == list(range(min(N, 50)))


def _avro(schema: dict[str, Any]) -> Any:
    from confluent_kafka.schema_registry import Schema

    return Schema(json.dumps(schema), "AVRO")


async def test_the_typed_demo_checks_every_order_through_the_registry() -> None:
    """``eosflow demo --typed``: Avro orders through the test kit's schema registry under
    a SIGKILL, one bad order dead-lettered, every good one decoded once."""
    out = await demo("--typed", "--records", "5000")
    said = (
        "typed: 4999 Avro orders decoded through the registry, each good order once; "
        "order 7 (amount -1) dead-lettered as written, alone: OK"
    )
    assert said in out
    assert "WARNING dead-lettering 1 record(s) from orders[" in out


# Instances starting together register their output schema at the same moment. The
# registry creates the subject for one of them and may answer the others "already
# exists" (Apicurio: HTTP 409): that is no incompatibility, and every instance gets the
# one id. Caught: the 409 mapped to IncompatibleSchemaError without asking again.
async def test_instances_registering_a_new_schema_at_once_all_get_its_id(
    eosflow_schema_registry: Any,
) -> None:
    from eosflow._schemas import Registry

    url = eosflow_schema_registry.url
    text = json.dumps(
        {"type": "record", "name": "Total", "fields": [{"name": "id", "type": "long"}]}
    )
    for round_ in range(5):
        subject = f"at-once-{id(text)}-{round_}-value"
        clients = [Registry(eosflow.SchemaRegistrySettings(url=url)) for _ in range(8)]
        try:
            ids = await asyncio.gather(*(c.register(subject, "AVRO", text) for c in clients))
        finally:
            for c in clients:
                await c.close()
        assert len(set(ids)) == 1, ids
