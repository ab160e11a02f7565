"""One typed-records benchmark contender in its own process (``python -m benchmarks typed``).

    python -m benchmarks._typed_contenders NAME BOOTSTRAP SRC DST RECORDS GROUP REGISTRY \
        INTERVAL_S TXN_RECORDS TXN_BYTES MIN_TXN_S [PROFILE_PATH]

Each contender consumes RECORDS ``Order``s from SRC and writes each back to DST exactly
once (transactions), its key and partition as read; the last four arguments are the
transaction budget every contender gets (``_budget``, as ``python -m benchmarks run``).
NAME:

- ``eosflow-bytes``: eosflow's pass-through of the JSON topic, bytes in and out (the
  baseline), defaults;
- ``eosflow-json-model``: the same with ``topics = {SRC: Topic(value=Order), DST:
  Topic(value=Order)}``: each value validated into an ``Order`` from its JSON and written
  back as the model's JSON;
- ``quixstreams-json``: quixstreams 3 exactly-once, its ``json`` deserializer and
  serializer (orjson: dicts, no validation), a ``StreamingDataFrame`` that ticks and
  forwards, as ``compare.py``'s quixstreams contender;
- ``eosflow-json-dicts``: ``Topic(value=eosflow.JSON)`` in and out: dicts, not
  validated -- the same work as ``quixstreams-json``;
- ``eosflow-avro``: eosflow with ``eosflow.Avro(Order)`` in and out, through the
  registry at REGISTRY (the Confluent wire format);
- ``eosflow-avro-dicts``: ``eosflow.Avro(schema=...)`` (the schema derived from
  ``Order``) in and out: dicts, not validated -- the same work as ``confluent-avro``;
- ``eosflow-json-model-ahead``, ``eosflow-avro-ahead`` (not default contenders): the two
  typed eosflow contenders with ``process_ahead`` on (the next records processed while a
  commit is in flight), as ``compare.py``'s ``eosflow-ahead``;
- ``confluent-avro``: ``compare.py``'s librdkafka transactional loop (``TxnRule``,
  ``_fetch``, its producer and consumer settings) with confluent-kafka's
  ``AvroDeserializer`` (the writer's schema, dicts) and ``AvroSerializer`` (the
  ``Order`` schema eosflow derives) on its ``SchemaRegistryClient``;
- ``confluent-avro-models``: the same with ``from_dict``/``to_dict`` to and from the
  ``Order`` model (``model_validate``, ``model_dump``) -- the same work as
  ``eosflow-avro``.

The clock is ``compare.py``'s (``_clock.Finish``): from the first record processed to
the group's committed offsets at the end of the input; ``cpu_s`` is the process's CPU
time (every thread's: librdkafka's too) over the same span. Prints ``progress N RSS``
lines while it runs (records done, the RSS in MiB; the parent echoes them) and one JSON
line at the end. With PROFILE_PATH the run is sampled by pyinstrument (the main thread's
stack, 1 ms) and its text report written there.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from pydantic import BaseModel

from benchmarks._budget import Budget, TxnRule, eosflow_settings, quix_settings
from benchmarks._clock import Finish
from benchmarks._contenders import (
    EXTRA,
    IDLE_MS,
    _fetch,
    _produce,
    librdkafka_consumer,
    librdkafka_producer,
    peak_rss_mb,
    phases,
)

CONTENDERS = [
    "eosflow-bytes",
    "eosflow-json-model",
    "eosflow-json-dicts",
    "quixstreams-json",
    "eosflow-avro",
    "confluent-avro-models",
    "eosflow-avro-dicts",
    "confluent-avro",
]
AHEAD = ["eosflow-json-model-ahead", "eosflow-avro-ahead"]  # not default contenders
AVRO = (  # they read the Avro topic
    "eosflow-avro",
    "eosflow-avro-dicts",
    "confluent-avro",
    "confluent-avro-models",
    "eosflow-avro-ahead",
)
PROGRESS_S = 2.0


class Item(BaseModel):
    sku: str
    qty: int


class Order(BaseModel):
    id: int
    customer: str
    total: float
    items: list[Item]


def order(i: int) -> Order:
    """The ``i``-th input record's value (keyed ``str(i)``): ~110 B as JSON, ~45 B in Avro."""
    return Order(
        id=i,
        customer=f"c{i % 10_000:05d}",
        total=(i % 100_000) / 100,
        items=[
            Item(sku=f"sku-{i % 997:04d}", qty=1 + i % 5),
            Item(sku=f"sku-{(7 * i) % 997:04d}", qty=1 + (i // 5) % 5),
        ],
    )


class _Progress:
    """``progress N`` on stdout at most every ``PROGRESS_S``."""

    def __init__(self) -> None:
        self._next = time.monotonic() + PROGRESS_S

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + PROGRESS_S
            print(f"progress {done} {peak_rss_mb('VmRSS'):.0f}", flush=True)


async def run_eosflow(
    name: str, boot: str, src: str, dst: str, n: int, budget: Budget, group: str, registry: str
) -> float:
    import eosflow

    first: list[float] = []
    finish = Finish(boot, group, src, n)
    ahead = name.endswith("-ahead")
    name = name.removesuffix("-ahead")
    if name == "eosflow-json-model":
        declared: dict[str, eosflow.Topic] = {
            src: eosflow.Topic(value=Order),
            dst: eosflow.Topic(value=Order),
        }
    elif name == "eosflow-json-dicts":
        declared = {src: eosflow.Topic(value=eosflow.JSON), dst: eosflow.Topic(value=eosflow.JSON)}
    elif name in ("eosflow-avro", "eosflow-avro-dicts"):
        side = (
            eosflow.Avro(Order)
            if name == "eosflow-avro"
            else eosflow.Avro(schema=avro_schema_text())
        )
        declared = {src: eosflow.Topic(value=side), dst: eosflow.Topic(value=side)}
    else:
        declared = {}
    avro = name in AVRO
    settings = eosflow.SchemaRegistrySettings(url=registry) if avro else None

    class Copy(eosflow.Processor):
        topics = declared
        schema_registry = settings

        async def process(self, record: eosflow.Record[bytes, Order]) -> eosflow.Output:
            if not first:
                first.append(time.monotonic())
                EXTRA["cpu0"] = time.process_time()
            return eosflow.Output(dst, record.value, key=record.key, partition=record.partition)

    config = eosflow.EosConfig(
        bootstrap_servers=boot,
        group_id=group,
        input_topics=(src,),
        transactional_id=group,
        **eosflow_settings(budget),
        **({"process_ahead": True} if ahead else {}),  # else eosflow's default
    )
    app = eosflow.EosApp(Copy(), config, observers=[phases()])
    progress = _Progress()
    async with app:
        while app.stats.records < n:
            if app.failure is not None:
                raise app.failure
            if "hwm_tenth_mb" not in EXTRA and app.stats.records >= n // 10:
                EXTRA["hwm_tenth_mb"] = peak_rss_mb()
            progress(app.stats.records)
            await asyncio.sleep(0.005)
        finish.begin()
        EXTRA["own_s"] = time.monotonic() - first[0]  # its last transaction ended
        done = await asyncio.to_thread(finish.at)
        EXTRA["cpu_s"] = time.process_time() - EXTRA["cpu0"]
    EXTRA["commits"] = app.stats.committed
    EXTRA["dropped_ahead"] = app.stats.dropped_ahead
    return done - first[0]


def run_confluent_avro(
    boot: str,
    src: str,
    dst: str,
    n: int,
    budget: Budget,
    group: str,
    registry: str,
    models: bool = False,
) -> float:
    """``_contenders.run_librdkafka`` with each value deserialized by confluent-kafka's
    ``AvroDeserializer`` and serialized again by its ``AvroSerializer`` (its registry
    client caches the schemas: the output's is registered at the first record, the
    input's fetched once); the serialization contexts built once, not per record. With
    ``models``, each dict is validated into an ``Order`` (``from_dict``) and dumped back
    (``to_dict``), as a user of the serializers with pydantic models writes it."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from eosflow._schemas import avro_schema_of

    client = SchemaRegistryClient({"url": registry})
    schema = json.dumps(avro_schema_of(Order))
    if models:
        validate, dump = Order.model_validate, Order.model_dump
        deserialize = AvroDeserializer(client, from_dict=lambda d, _ctx: validate(d))
        serialize = AvroSerializer(client, schema, to_dict=lambda m, _ctx: dump(m))
    else:
        deserialize = AvroDeserializer(client)
        serialize = AvroSerializer(client, schema)
    in_ctx = SerializationContext(src, MessageField.VALUE)
    out_ctx = SerializationContext(dst, MessageField.VALUE)

    consumer = Consumer(librdkafka_consumer(boot, group))
    producer = Producer(librdkafka_producer(boot, group, budget))
    finish = Finish(boot, group, src, n)
    producer.init_transactions(30)
    consumer.subscribe([src])
    rule = TxnRule(budget)
    progress = _Progress()
    done = 0
    first = 0.0
    try:
        while done < n:
            msgs = _fetch(consumer, rule.room(), IDLE_MS / 1000)
            if not msgs:
                continue
            if not first:
                first = time.monotonic()
                EXTRA["cpu0"] = time.process_time()
            rule.begin()
            producer.begin_transaction()
            offsets: dict[int, int] = {}
            while True:
                nbytes = 0
                for m in msgs:
                    if m.error() is not None:
                        raise KafkaException(m.error())
                    key, raw = m.key(), m.value()
                    value = serialize(deserialize(raw, in_ctx), out_ctx)
                    _produce(producer, dst, value, key, m.partition())
                    offsets[m.partition()] = m.offset() + 1
                    nbytes += len(key or b"") + len(raw or b"")
                rule.took(len(msgs), nbytes)
                done += len(msgs)
                if rule.full():
                    break
                msgs = _fetch(consumer, rule.room(), rule.wait_s())
                if not msgs:
                    break
            producer.send_offsets_to_transaction(
                [TopicPartition(src, p, o) for p, o in offsets.items()],
                consumer.consumer_group_metadata(),
            )
            producer.commit_transaction()
            rule.end()
            progress(done)
        finish.begin()
        done_at = finish.at()
        EXTRA["cpu_s"] = time.process_time() - EXTRA["cpu0"]
        return done_at - first
    finally:
        consumer.close()


def run_quixstreams(boot: str, src: str, dst: str, n: int, budget: Budget, group: str) -> float:
    """``compare.py``'s quixstreams contender with its ``json`` serializers (orjson) on the
    values: dicts in, dicts out."""
    from quixstreams import Application

    app = Application(
        broker_address=boot,
        consumer_group=group,
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        loglevel="WARNING",
        auto_create_topics=False,
        **quix_settings(budget),
    )
    t_in = app.topic(src, value_deserializer="json", key_deserializer="bytes")
    t_out = app.topic(dst, value_serializer="json", key_serializer="bytes")
    seen = [0]
    first: list[float] = []
    finish = Finish(boot, group, src, n)
    progress = _Progress()

    def count(value: Any) -> None:
        if not first:
            first.append(time.monotonic())
            EXTRA["cpu0"] = time.process_time()
        seen[0] += 1
        if seen[0] % 10_000 == 0:
            progress(seen[0])
        if seen[0] >= n:
            finish.begin()
            app.stop()  # graceful: the final checkpoint commits the last transaction

    app.dataframe(t_in).update(count).to_topic(t_out)
    app.run()
    done = finish.at()
    EXTRA["cpu_s"] = time.process_time() - EXTRA["cpu0"]
    return done - first[0]


def run(name: str, args: tuple[str, str, str, int, Budget, str], registry: str) -> float:
    if name == "quixstreams-json":
        return run_quixstreams(*args)
    if name in ("confluent-avro", "confluent-avro-models"):
        return run_confluent_avro(*args, registry, models=name.endswith("-models"))
    if name.startswith("eosflow-"):
        return asyncio.run(run_eosflow(name, *args, registry))
    raise SystemExit(f"unknown contender {name!r}")


def main() -> None:
    name, boot, src, dst, n, group, registry = sys.argv[1:8]
    budget = Budget.from_argv(sys.argv[8:12])
    profile = sys.argv[12] if len(sys.argv) > 12 else None
    args = (boot, src, dst, int(n), budget, group)
    if profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001, async_mode="disabled")
        profiler.start()
        try:
            seconds = run(name, args, registry)
        finally:
            profiler.stop()
            with open(profile, "w") as out:
                out.write(profiler.output_text(unicode=False, show_all=False))
    else:
        seconds = run(name, args, registry)
    line = {"contender": name, "records": int(n), "seconds": seconds, "rss_peak_mb": peak_rss_mb()}
    print(json.dumps({**line, **EXTRA}), flush=True)


def avro_schema_text() -> str:
    from eosflow._schemas import avro_schema_of

    return json.dumps(avro_schema_of(Order))


def json_value(i: int) -> bytes:
    """The ``i``-th record's JSON, as pydantic writes it (``model_dump_json``)."""
    return order(i).model_dump_json().encode()


if __name__ == "__main__":
    main()
