"""The typed chaos run's input and its check (``tests/procs/slow_typed.py``): readings
written in Avro by confluent-kafka's own serializer through the registry, and the
tallies read back with its deserializer -- each key's exactly counts 1..n, with the
running totals of its amounts in offset order."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

from aiokafka import AIOKafkaProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from slow_typed import Reading

from eosflow._schemas import avro_schema_of
from eosflow.testing import read_topic


def amount(i: int) -> int:
    return (i * 7919) % 1000


async def seed_readings(bootstrap: str, topic: str, n: int, keys: int, registry: str) -> None:
    """``n`` readings, record i keyed ``k<i % keys>`` (placed by the key's hash), value
    ``Reading(seq=i, amount=amount(i))`` in Avro, framed by confluent-kafka."""
    write = AvroSerializer(
        SchemaRegistryClient({"url": registry}), json.dumps(avro_schema_of(Reading))
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await p.start()
    try:
        futs = [
            await p.send(
                topic, write({"seq": i, "amount": amount(i)}, ctx), key=f"k{i % keys}".encode()
            )
            for i in range(n)
        ]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def tallies_ok(bootstrap: str, src: str, dst: str, registry: str, events: list[str]) -> None:
    """Every committed tally decodes, and each key's are exactly 1..n with the totals
    and last sequence numbers its readings give in offset order."""
    client = SchemaRegistryClient({"url": registry})
    read_in, read_out = AvroDeserializer(client), AvroDeserializer(client)
    in_ctx = SerializationContext(src, MessageField.VALUE)
    out_ctx = SerializationContext(dst, MessageField.VALUE)
    readings: dict[bytes, list[dict[str, int]]] = defaultdict(list)
    for _p, _o, key, value in sorted(await read_topic(bootstrap, src)):
        readings[key or b""].append(read_in(value, in_ctx))
    tallies: dict[bytes, list[dict[str, int]]] = defaultdict(list)
    for _p, _o, key, value in await read_topic(bootstrap, dst):
        tallies[key or b""].append(read_out(value, out_ctx))
    bad = []
    for key in sorted(set(readings) | set(tallies)):
        got = sorted(tallies.get(key, []), key=lambda t: t["count"])
        want, total = [], 0
        for count, r in enumerate(readings.get(key, []), 1):
            total += r["amount"]
            want.append({"count": count, "total": total, "last_seq": r["seq"]})
        if got != want:  # from the first departure: what a reading made, what it should
            at = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), 0)
            bad.append((key, len(got), len(want), at, got[at : at + 3], want[at : at + 3]))
    total_out = sum(len(t) for t in tallies.values())
    assert not bad, f"{len(bad)} key(s) wrong, first {bad[:3]}; events {events}"
    assert total_out == sum(len(r) for r in readings.values())
    print(f"typed: {len(readings)} keys, {total_out} tallies decoded, each exactly once")
