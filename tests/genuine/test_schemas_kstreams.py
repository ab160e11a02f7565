"""A Kafka Streams app with Apicurio Registry's own Avro serde and eosflow, both ways, through
one genuine schema registry (Apicurio Registry 2.4.2, started by the test kit) and Kafka
from the ladder (issue 53.5).

An eosflow app writes N orders to ``orders`` with ``eosflow.Avro(Order)`` (the
Confluent-compatible API: its schema registered at start under ``<orders>-value``); a Kafka
Streams app (``tests/java/ApicurioDoubler.java``, exactly_once_v2, Kafka Streams 4.4.0 with
``io.apicurio:apicurio-registry-serdes-avro-serde`` of the registry's version, resolved
from Maven Central) reads them as ``GenericRecord`` with Apicurio's ``AvroSerde`` and writes
each doubled, a ``Doubled`` record, to ``doubled`` with the same serde, which registers
that schema itself; the same eosflow app reads ``doubled`` with ``eosflow.Avro(Doubled)``
and checks every value, each order exactly once.

The serde's settings that make the ids agree (``SERDE`` below, handed to the Java app):

- ``apicurio.registry.url`` = ``http://host:port/apis/registry/v2``: Apicurio's serdes
  speak only the registry's own v2 API (eosflow speaks the Confluent-compatible one,
  ``/apis/ccompat/v7``, of the same registry);
- ``apicurio.registry.headers.enabled=false``: by default the serializer puts the id in
  the record's headers (``apicurio.value.globalId``) and writes the bare Avro body -- no
  magic byte, no id -- which is not the wire format eosflow and confluent's
  deserializers read; off, it writes the magic byte and the id before the body;
- ``apicurio.registry.id-handler=io.apicurio.registry.serde.Legacy4ByteIdHandler``: that
  id in 4 bytes (the default handler writes 8); ``apicurio.registry.as-confluent=true``
  does the same (and passed here too), with a warning at every start in 2.4.2 ("Duplicate
  id-handler configuration": the id-handler setting always has its default);
- ``apicurio.registry.use-id=contentId``: the ids the Confluent-compatible API hands out
  and answers ``/schemas/ids/{id}`` for are Apicurio's *content* ids (with
  ``registry.ccompat.legacy-id-mode.enabled`` off, its default); the serde's default,
  ``globalId``, numbers versions instead -- one schema under two subjects is one content
  id and two global ids -- so with it the two sides name different schemas;
- ``apicurio.registry.auto-register=true``: the serializer registers its output's schema
  as the artifact ``<doubled>-value`` of the default group, which is the subject
  ``<doubled>-value`` of the Confluent-compatible API (off, the default, the schema must
  be there already).

Before the apps start, one schema is registered under two subjects (``decoy``), so that
from then on a new version's global id is never its content id: an id taken from the
wrong counter does not name the same schema by chance. The test also reads the ids in the records'
headers and checks them against what the registry's v2 API says of each subject.

Costs: Maven resolves Kafka Streams and the serde (23 jars, 104 MB with RocksDB's) and
javac compiles the app once, into ``<kafka cache>/kstreams-apicurio-<versions>/``
(progress on stderr); then the test takes ~7 s -- the JVM's start and Kafka Streams'
group join most of it -- on the test cluster and on genuine 4.4.0 alike.

Mutations caught: ``apicurio.registry.use-id`` left at its default (``globalId``) -- the
Kafka Streams app looked eosflow's Order id up as a global id, found another schema
there (the decoy's, in a fresh registry) and failed (``AvroRuntimeException: Not a
valid schema field: id``);
``apicurio.registry.headers.enabled`` left on -- the bare body of the first Doubled begins
with a 0 byte (Avro's id 0), so eosflow took its next four bytes for a schema id the
registry does not know and stopped, the record not decoded."""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from kit import create_topic, eventually, ladder_config
from pydantic import BaseModel

import eosflow
from benchmarks._jvm import compile_sources
from eosflow._checks._checker import read_records
from eosflow.testing import _genuine_procs as procs
from eosflow.testing._genuine_jars import GenuineUnavailable, coordinates, resolve_artifacts
from eosflow.testing._ladder import Broker
from eosflow.testing._registry import APICURIO_VERSION, call

pytestmark = pytest.mark.genuine

N = 50
STREAMS_VERSION = "4.4.0"
SERDE_ARTIFACT = "apicurio-registry-serdes-avro-serde"
JAVA = Path(__file__).resolve().parents[1] / "java" / "ApicurioDoubler.java"
SERDE = {
    "apicurio.registry.headers.enabled": "false",
    "apicurio.registry.id-handler": "io.apicurio.registry.serde.Legacy4ByteIdHandler",
    "apicurio.registry.use-id": "contentId",
    "apicurio.registry.auto-register": "true",
}


class Order(BaseModel):
    id: int
    customer: str
    qty: int


class Doubled(BaseModel):
    id: int
    customer: str
    qty: int


def prepare_java() -> tuple[Path, Path]:
    """The jars (Kafka Streams, Apicurio's Avro serde, the log binding) and the compiled
    app: resolved and compiled the first time, reused after."""
    deps = [
        ("org.apache.kafka", "kafka-streams", STREAMS_VERSION),
        ("org.apache.kafka", "kafka-clients", STREAMS_VERSION),  # over the serde's older one
        ("io.apicurio", SERDE_ARTIFACT, APICURIO_VERSION),
        *coordinates(STREAMS_VERSION)[1:],  # the log binding
    ]
    what = f"Kafka Streams {STREAMS_VERSION} with Apicurio's Avro serde {APICURIO_VERSION}"
    name = f"kstreams-apicurio-{STREAMS_VERSION}-{APICURIO_VERSION}"
    libs = resolve_artifacts(name, deps, what, SERDE_ARTIFACT)
    return libs, compile_sources([JAVA], libs, JAVA.stem, what)


async def java_ready() -> tuple[Path, Path]:
    try:
        return await asyncio.to_thread(prepare_java)
    except GenuineUnavailable as exc:
        why = f"Kafka Streams with Apicurio's serde cannot run here: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why} (CI: no skipping)", pytrace=False)
        pytest.skip(why)


def decoy(ccompat: str) -> None:
    """One schema under two subjects: one content id, two global ids."""
    name = f"Decoy{uuid.uuid4().hex[:8]}"
    schema = {"schema": f'{{"type":"record","name":"{name}","fields":[]}}'}
    for n in (1, 2):
        status, answer = call("POST", f"{ccompat}/subjects/{name}-{n}/versions", schema)
        assert status == 200, answer


def pipeline(seeds: str, orders: str, doubled: str, url: str, seen: dict[int, Doubled]) -> Any:
    class Pipeline(eosflow.Processor):
        """Seeds in, orders out (Avro); the Kafka Streams app's Doubled records in, kept
        by id in ``seen`` (a transaction of this app tried again reads them again)."""

        topics = {
            seeds: eosflow.Topic(key=str, value=str),
            orders: eosflow.Topic(key=str, value=eosflow.Avro(Order)),
            doubled: eosflow.Topic(key=str, value=eosflow.Avro(Doubled)),
        }
        schema_registry = eosflow.SchemaRegistrySettings(url=url)

        async def process(self, record: eosflow.Record[str, Any]) -> eosflow.Output | None:
            if record.topic == doubled:
                seen[record.value.id] = record.value
                return None
            i = int(record.value)
            order = Order(id=i, customer=f"c{i % 3}", qty=i)
            return eosflow.Output(orders, order, key=record.key)

    return Pipeline()


def ids_in(records: list[Any]) -> set[int]:
    """The schema ids in the wire format's headers (magic byte 0, then 4 bytes)."""
    assert all(r.value[0] == 0 for r in records)
    return {struct.unpack(">I", r.value[1:5])[0] for r in records}


async def test_kafka_streams_with_apicurios_avro_serde_and_eosflow_read_each_other(
    eosflow_broker: Broker, eosflow_schema_registry: Any, tmp_path: Path
) -> None:
    b, url = eosflow_broker, eosflow_schema_registry.url
    v2 = url.replace("/apis/ccompat/v7", "/apis/registry/v2")
    libs, classes = await java_ready()
    seeds, orders, doubled = b.unique("seeds"), b.unique("orders"), b.unique("doubled")
    for topic in (seeds, orders, doubled):
        await create_topic(b.bootstrap_servers, topic, 1)
    decoy(url)

    serde = {"apicurio.registry.url": v2, **SERDE}
    args = [b.bootstrap_servers, orders, doubled, b.unique("kstreams"), str(tmp_path / "state")]
    args += [str(N), *(f"{k}={v}" for k, v in serde.items())]
    cmd = procs.java_command(
        libs, tmp_path, JAVA.stem, *args, heap_mb=256, log4j1=False, level="WARN", classes=classes
    )
    log = tmp_path / "kstreams.log"
    java = procs.spawn(cmd, log, tmp_path)
    seen: dict[int, Doubled] = {}
    try:
        p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
        await p.start()
        try:
            for i in range(N):
                await p.send_and_wait(seeds, str(i).encode(), key=f"c{i % 3}".encode())
        finally:
            await p.stop()
        config = ladder_config(b, seeds, b.unique("g"), input_topics=(seeds, doubled))
        app = eosflow.EosApp(pipeline(seeds, orders, doubled, url, seen), config)
        async with app:

            async def done() -> bool:
                assert app.failure is None, f"{app.failure}\n{procs.tail(log, 40)}"
                assert java.poll() in (None, 0), procs.tail(log, 60)
                return len(seen) >= N and app.last_outcome is eosflow.Outcome.COMMITTED

            await eventually(done, timeout_s=60, what=f"{N} Doubled records read back")
        try:
            code: int | None = await asyncio.to_thread(java.wait, 30)
        except subprocess.TimeoutExpired:
            code = None  # still running
        assert code == 0, f"the Kafka Streams app: exit {code}\n{procs.tail(log, 60)}"
    finally:
        procs.terminate(java, grace_s=10)

    # every order doubled by the Kafka Streams app, each once in what it committed
    want = [Doubled(id=i, customer=f"c{i % 3}", qty=2 * i) for i in range(N)]
    assert [seen[i] for i in sorted(seen)] == want
    assert len(await read_records(b.bootstrap_servers, doubled)) == N
    # the ids both sides wrote: the content id of their subject's version, which the
    # Confluent-compatible API answers for, and not the version's global id
    for topic, name in ((orders, "Order"), (doubled, "Doubled")):
        written = ids_in(await read_records(b.bootstrap_servers, topic))
        status, meta = call("GET", f"{v2}/groups/default/artifacts/{topic}-value/meta")
        assert status == 200, meta
        assert written == {meta["contentId"]} != {meta["globalId"]}, (topic, meta)
        status, schema = call("GET", f"{url}/schemas/ids/{meta['contentId']}")
        assert status == 200 and f'"name":"{name}"' in schema["schema"].replace(" ", ""), schema
