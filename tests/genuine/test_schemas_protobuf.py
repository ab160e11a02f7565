"""Protobuf through a genuine schema registry (Apicurio Registry 2.4.2, started by the
test kit) and Kafka from the ladder: records written by confluent-kafka's own
``ProtobufSerializer`` (with its ``SchemaRegistryClient``) are read by eosflow, and
eosflow's outputs are read by confluent-kafka's ``ProtobufDeserializer``; a record whose
message indexes name another message is dead-lettered; the ``.proto`` text eosflow
writes is registered, and the registry's compatibility check takes a compatible next
version and refuses an incompatible one. The message classes come from
``tests/protos.py`` (descriptors built in Python: no protoc, no new dependency).

How confluent-kafka meets this registry, and why so:

- its ``ProtobufSerializer`` runs as it comes (``auto.register.schemas`` on,
  ``use.deprecated.format`` off): it registers its own form of the schema, a base64
  ``FileDescriptorProto``, as the first version of the input's subject, which this
  registry takes (it is a later compatibility check against that form that fails here
  with HTTP 500); eosflow reads that form to find which message the indexes name;
- its ``ProtobufDeserializer`` reads eosflow's outputs without a registry client: with
  one, it asks for the writer's schema as a base64 descriptor (``format=serialized``),
  which Apicurio does not serve -- it answers the ``.proto`` text eosflow registered,
  which the deserializer then fails to parse as a descriptor. Without one it reads the
  wire format (magic byte, schema id, message indexes) and parses the body with the
  class it is given; the schema id and the text registered under it are checked against
  the registry here instead.

The comment above each test names the mutation it caught."""

from __future__ import annotations

from typing import Any

import protos
import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kit import create_topic, eventually, ladder_config

import eosflow
from eosflow._checks._checker import read_records
from eosflow._schemas import proto_text_of
from eosflow._typed import Typing
from eosflow.testing._ladder import Broker

pytestmark = pytest.mark.genuine

N = 30
SHOP = protos.classes(protos.order_file())
Order, Line, Total = SHOP["shop.Order"], SHOP["shop.Order.Line"], SHOP["shop.Total"]
NEW = {"use.deprecated.format": False}


def orders() -> list[Any]:
    """Orders using every kind of field the file has: repeated, maps, a proto3 optional
    (set on every other one), an enum, nested messages, a oneof, a nested enum."""
    return [
        Order(
            id=i,
            customer=f"c{i % 3}",
            qty=i,
            tags=["t"] * (i % 3),
            counts={"n": i},
            kind=i % 3,
            lines=[Line(sku=f"s{i}", qty=1)],
            prices={"p": i / 4},
            status=1,
            **({"note": ""} if i % 2 else {}),
            **({"card": "visa"} if i % 2 else {"cash": i}),
        )
        for i in range(N)
    ]


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        for i, v in enumerate(values):
            await p.send_and_wait(topic, v, key=f"c{i % 3}".encode(), partition=0)
    finally:
        await p.stop()


def totaller(src: str, dst: str, registry: str, seen: list[Any]) -> eosflow.Processor:
    class Totaller(eosflow.Processor):
        topics = {
            src: eosflow.Topic(key=str, value=eosflow.Protobuf(Order)),
            dst: eosflow.Topic(key=str, value=eosflow.Protobuf(Total)),
        }
        schema_registry = eosflow.SchemaRegistrySettings(url=registry)

        async def process(self, record: eosflow.Record[str, Any]) -> eosflow.Output:
            o = record.value
            seen.append(o)
            total = Total(id=o.id, customer=o.customer, doubled=2 * o.qty)
            return eosflow.Output(dst, total, key=record.key)

    return Totaller()


# Confluent's Orders read by eosflow (every field as written), eosflow's Totals (the
# file's second message: indexes [1]) read by confluent, and a Total written where Orders
# are declared dead-lettered as written. Caught: the base64 descriptor confluent
# registers not read (every record then dead-lettered: "the writer's schema declares no
# message shop.Order"; none processed); the indexes left off eosflow's outputs
# (confluent's deserializer read the body's first bytes as indexes: EOFError); the
# indexes not compared (the Total was parsed as an Order and processed).
async def test_protobuf_written_by_confluent_is_read_and_eosflows_is_read_by_confluent(
    eosflow_broker: Broker, eosflow_schema_registry: Any
) -> None:
    b, url = eosflow_broker, eosflow_schema_registry.url
    src, dst, dlq = b.unique("orders"), b.unique("totals"), b.unique("dlq")
    for topic in (src, dst, dlq):
        await create_topic(b.bootstrap_servers, topic, 1)
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext(src, MessageField.VALUE)
    write = ProtobufSerializer(Order, client, NEW)
    values = [write(o, ctx) for o in orders()]
    stray = ProtobufSerializer(Total, client, NEW)(Total(id=99, customer="x", doubled=1), ctx)
    assert stray[5:7] == b"\x02\x02" and values[0][5:6] == b"\x00"  # [1] and [0]
    values.insert(7, stray)
    await produce(b.bootstrap_servers, src, values)

    seen: list[Any] = []
    app = eosflow.EosApp(
        totaller(src, dst, url, seen), ladder_config(b, src, b.unique("g"), dead_letter_topic=dlq)
    )
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return app.stats.records >= N + 1 and app.last_outcome is eosflow.Outcome.COMMITTED

        await eventually(done, timeout_s=60, what=f"{N + 1} records processed and committed")

    assert {o.id: o for o in seen} == {o.id: o for o in orders()}
    written = [r.value for r in await read_records(b.bootstrap_servers, dst)]
    read = ProtobufDeserializer(Total, NEW)
    out_ctx = SerializationContext(dst, MessageField.VALUE)
    got = [read(v, out_ctx) for v in written]
    assert got == [Total(id=i, customer=f"c{i % 3}", doubled=2 * i) for i in range(N)]
    registered = client.get_latest_version(f"{dst}-value")
    assert registered.schema.schema_type == "PROTOBUF"
    assert registered.schema.schema_str == proto_text_of(Total)
    assert {v[:7] for v in written} == {b"\x00" + registered.schema_id.to_bytes(4) + b"\x02\x02"}
    dead = await read_records(b.bootstrap_servers, dlq)
    assert [r.value for r in dead] == [stray]
    error = dict(dead[0].headers)["eosflow.error"].decode()
    assert "message indexes [1] name shop.Total, not shop.Order" in error, error
    assert app.stats.undecodable == 1


# A nested message both ways (indexes [0, 1]), its writer's schema fetched once for all
# its records. Caught: the zigzag decoding left off (confluent's 04 00 02 then read as a
# count of 4: cut short).
async def test_a_nested_message_both_ways_its_schema_fetched_once(
    eosflow_schema_registry: Any,
) -> None:
    url = eosflow_schema_registry.url
    client = SchemaRegistryClient({"url": url})
    src, dst = f"lines-{id(client)}", f"lines-out-{id(client)}"
    write = ProtobufSerializer(Line, client, NEW)
    ctx = SerializationContext(src, MessageField.VALUE)
    lines = [Line(sku=f"s{i}", qty=i) for i in range(20)]
    settings = eosflow.SchemaRegistrySettings(url=url)
    declared = {
        src: eosflow.Topic(value=eosflow.Protobuf(Line)),
        dst: eosflow.Topic(value=eosflow.Protobuf(Line)),
    }
    typing = Typing("Lines", declared, (src,), {}, settings)
    seen: list[Any] = []

    async def process(record: eosflow.Record) -> None:
        seen.append(record.value)

    handle = typing.decoding(process)  # type: ignore[arg-type]
    try:
        await typing.prepare()  # registers dst's schema: one request
        for i, line in enumerate(lines):
            data = write(line, ctx)
            assert data[5:8] == b"\x04\x00\x02"  # [0, 1], as confluent writes it
            await handle(eosflow.Record(src, 0, i, None, data, (), 1))
        assert typing.registry is not None
        assert typing.registry.requests == 2  # and src's writer schema, once
        out = typing.encode(eosflow.Output(dst, lines[3])).value
    finally:
        await typing.close()
    assert seen == lines
    assert isinstance(out, bytes) and out[5:8] == b"\x04\x00\x02"
    assert (
        ProtobufDeserializer(Line, NEW)(out, SerializationContext(dst, MessageField.VALUE))
        == (lines[3])
    )


# The .proto text eosflow writes is what the registry parses and checks: a next version
# with a field added is taken, one changing a field's type is refused at start naming
# the subject; a proto2 file's text (required, defaults, packed, reserved, extensions,
# an aliased enum, a service) registers too. Caught: a string default's quotes left
# unescaped (default = "say "hi"": the registry refused the text, HTTP 422).
async def test_the_generated_proto_text_registers_and_compatibility_is_checked(
    eosflow_schema_registry: Any,
) -> None:
    url = eosflow_schema_registry.url
    settings = eosflow.SchemaRegistrySettings(url=url)
    topic = f"evolving-{id(settings)}"
    subject = f"{topic}-value"
    v2 = protos.classes(protos.order_file(more=True))["shop.Order"]
    bad = protos.classes(protos.order_file(customer=protos.F.TYPE_INT64))["shop.Order"]
    item = protos.classes(protos.legacy_file())["legacy.Item"]

    async def register(message: Any, name: str = topic) -> None:
        declared = {name: eosflow.Topic(value=eosflow.Protobuf(message))}
        typing = Typing("Evolving", declared, (), {}, settings)
        try:
            await typing.prepare()
        finally:
            await typing.close()

    await register(Order)
    await register(v2)
    with pytest.raises(eosflow.IncompatibleSchemaError) as caught:
        await register(bad)
    assert caught.value.subject == subject
    await register(item, f"legacy-{id(settings)}")
    client = SchemaRegistryClient({"url": url})
    assert len(client.get_versions(subject)) == 2
    assert client.get_latest_version(subject).schema.schema_str == proto_text_of(v2)
    assert "string channel = 13;" in proto_text_of(v2)
