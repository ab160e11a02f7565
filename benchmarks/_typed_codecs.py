"""The typed benchmark's codec costs (``python -m benchmarks typed``): each codec on one
record in this process, eosflow's against pydantic's, fastavro's, confluent-kafka's and
quixstreams' own calls -- the best of ``ROUNDS`` rounds taken in turns."""

from __future__ import annotations

import functools
import io
import json
import timeit
import uuid
from collections.abc import Callable

from benchmarks._typed_contenders import Order, avro_schema_text, json_value, order

ROUNDS = 7  # the codec costs: the best of this many rounds


async def codec_costs(registry: str, number: int) -> list[tuple[str, float]]:
    """(what, µs per call) on one record, ``order(12345)``, in this process: the best of
    ``ROUNDS`` rounds of ``number`` calls each, every call measured once a round in turn
    (a slow spell of this shared machine then costs each of them a round, not one of
    them all its rounds)."""
    import fastavro
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from quixstreams.models.serializers import JSONDeserializer, JSONSerializer
    from quixstreams.models.serializers import SerializationContext as QuixContext

    import eosflow
    from eosflow._processor import as_outputs
    from eosflow._schemas import Avro, Registry
    from eosflow._typed import Model, Topic, Typing

    model = order(12345)
    as_json = json_value(12345)
    as_dict = model.model_dump()
    calls: list[tuple[str, Callable[[], object]]] = []

    def time_it(what: str, fn: Callable[[], object]) -> None:
        fn()  # it works (and is warm) before it is timed
        calls.append((what, fn))

    # pydantic's own JSON calls, and eosflow's codec and typed path around them
    serializer = Order.__pydantic_serializer__
    time_it("pydantic Order.model_validate_json alone", lambda: Order.model_validate_json(as_json))
    time_it("pydantic's serializer to_json alone", lambda: serializer.to_json(model))
    codec = Model(Order)
    time_it("eosflow Model(Order).loads (JSON -> Order)", lambda: codec.loads(as_json))
    time_it("eosflow Model(Order).dumps (Order -> JSON)", lambda: codec.dumps(model))
    typing = Typing(
        "Bench",
        {"in": Topic(value=Order), "out": Topic(value=Order)},
        inputs={"in"},
    )
    wrapped = typing.decoding(lambda rec: rec)  # hands back the decoded Record
    record = eosflow.Record("in", 0, 0, b"12345", as_json)
    output = eosflow.Output("out", model, key=b"12345", partition=0)
    time_it("eosflow typed path, JSON: the decode wrapper (a new Record)", lambda: wrapped(record))
    time_it("eosflow typed path, JSON: Typing.encode of the Output", lambda: typing.encode(output))
    to_bytes = functools.partial(as_outputs, encode=typing.encode)  # a lazy result's check
    time_it(
        "eosflow typed path, JSON: a list of one Output (as_outputs, encode)",
        lambda: to_bytes([output]),
    )

    async def copy(rec: eosflow.Record) -> eosflow.Output:
        return eosflow.Output("out", rec.value, key=rec.key, partition=rec.partition)

    copying = typing.decoding(copy)

    def whole_way() -> object:  # as the per-record loop: decoded, processed, encoded
        step = copying(record).__await__()
        try:
            step.send(None)
        except StopIteration as done:
            return typing.encode(done.value)
        raise RuntimeError("the copy awaited")

    time_it("eosflow typed path, JSON: a record's whole way (decode, copy, encode)", whole_way)

    # eosflow, Avro (its codec bound to the registry as an app binds it)
    reg = Registry(eosflow.SchemaRegistrySettings(url=registry))
    try:
        avro = Avro(Order).bind(reg, f"typed-codecs-{uuid.uuid4().hex[:6]}-value", "bench")
        await avro.prepare(True)  # registered: its own id decodes without a fetch
        framed = avro.dumps(model)
        assert avro.loads(framed) == model
        time_it("eosflow Avro(Order) loads (framed Avro -> Order)", lambda: avro.loads(framed))
        time_it("eosflow Avro(Order) dumps (Order -> framed Avro)", lambda: avro.dumps(model))
    finally:
        await reg.close()
    tag = uuid.uuid4().hex[:6]
    src, dst = f"typed-codecs-in-{tag}", f"typed-codecs-out-{tag}"
    a_typing = Typing(
        "Bench",
        {src: Topic(value=Avro(Order)), dst: Topic(value=Avro(Order))},
        inputs={src},
        registry=eosflow.SchemaRegistrySettings(url=registry),
    )
    try:
        await a_typing.prepare()  # the output's schema registered, as at an app's start
        a_output = eosflow.Output(dst, model, key=b"12345", partition=0)
        a_record = eosflow.Record(src, 0, 0, b"12345", a_typing.encode(a_output).value)

        async def back(rec: eosflow.Record) -> eosflow.Record:
            return rec

        await a_typing.decoding(back)(a_record)  # its schema id fetched, once
        a_wrapped = a_typing.decoding(lambda rec: rec)
        assert a_wrapped(a_record).value == model  # type: ignore[attr-defined]
        time_it("eosflow typed path, Avro: the decode wrapper", lambda: a_wrapped(a_record))
        time_it(
            "eosflow typed path, Avro: Typing.encode of the Output",
            lambda: a_typing.encode(a_output),
        )
    finally:
        await a_typing.close()

    # confluent-kafka
    client = SchemaRegistryClient({"url": registry})
    topic = f"typed-codecs-c-{uuid.uuid4().hex[:6]}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    c_ser = AvroSerializer(client, avro_schema_text())
    c_de = AvroDeserializer(client)
    c_framed = c_ser(as_dict, ctx)
    assert c_framed is not None and c_de(c_framed, ctx) == as_dict
    time_it("confluent AvroDeserializer (framed Avro -> dict)", lambda: c_de(c_framed, ctx))
    time_it("confluent AvroSerializer (dict -> framed Avro)", lambda: c_ser(as_dict, ctx))
    m_de = AvroDeserializer(client, from_dict=lambda d, _ctx: Order.model_validate(d))
    m_ser = AvroSerializer(client, avro_schema_text(), to_dict=lambda o, _ctx: o.model_dump())
    assert m_de(c_framed, ctx) == model
    time_it("confluent AvroDeserializer + from_dict (-> Order)", lambda: m_de(c_framed, ctx))
    time_it("confluent AvroSerializer + to_dict (Order ->)", lambda: m_ser(model, ctx))

    # quixstreams' JSON (orjson, dicts)
    q_ctx = QuixContext(topic, "value")
    q_de, q_ser = JSONDeserializer(), JSONSerializer()
    assert q_de(as_json, q_ctx) == as_dict
    time_it("quixstreams JSONDeserializer (JSON -> dict)", lambda: q_de(as_json, q_ctx))
    time_it("quixstreams JSONSerializer (dict -> JSON)", lambda: q_ser(as_dict, q_ctx))

    # the floor: fastavro alone, and pydantic's part of it
    parsed = fastavro.parse_schema(json.loads(avro_schema_text()), named_schemas={})
    body = c_framed[5:]

    def read_body() -> object:
        return fastavro.schemaless_reader(io.BytesIO(body), parsed, None)

    def write_body() -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, as_dict)
        return out.getvalue()

    time_it("fastavro schemaless_reader alone (-> dict)", read_body)
    time_it("fastavro schemaless_writer alone (dict ->)", write_body)
    time_it("pydantic Order.model_validate(dict)", lambda: Order.model_validate(as_dict))
    time_it("pydantic Order.model_dump()", lambda: model.model_dump())
    best = [float("inf")] * len(calls)
    for _ in range(ROUNDS):
        for i, (_what, fn) in enumerate(calls):
            best[i] = min(best[i], timeit.timeit(fn, number=number))
    return [(what, t / number * 1e6) for (what, _fn), t in zip(calls, best, strict=True)]
