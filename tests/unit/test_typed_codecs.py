"""Typed records without Kafka: the codecs a declaration names, a record decoded (or the
one-line error saying which field did not), tombstones left alone, outputs encoded by
their topic's declaration. The comment above each test names the mutation it caught."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import eosflow
from eosflow._processor import as_outputs, normalised
from eosflow._typed import Model, Typing


class Item(BaseModel):
    sku: str
    qty: int


class Order(BaseModel):
    id: int
    items: list[Item]


def rec(value: bytes | None, key: bytes | None = b"c1", topic: str = "orders") -> eosflow.Record:
    return eosflow.Record(topic, 0, 7, key, value, (), 1)


def typing_of(topics: dict[str, Any], inputs: tuple[str, ...] = ("orders",)) -> Typing:
    return Typing("Shop", topics, inputs)


def through(typing: Typing, record: eosflow.Record) -> Any:
    """The record ``process`` would be handed."""
    seen: list[Any] = []

    async def process(r: eosflow.Record) -> None:
        seen.append(r)

    asyncio.run(typing.decoding(process)(record))  # type: ignore[arg-type]
    return seen[0]


# A declared input's key and value reach process decoded and validated. Caught: the
# wrapper handing the record on as read.
def test_a_declared_record_reaches_process_decoded() -> None:
    typing = typing_of({"orders": eosflow.Topic(key=str, value=Order)})
    got = through(typing, rec(b'{"id": 1, "items": [{"sku": "a", "qty": 2}]}'))
    assert got.key == "c1" and got.value == Order(id=1, items=[Item(sku="a", qty=2)])
    assert (got.topic, got.partition, got.offset, got.timestamp) == ("orders", 0, 7, 1)
    other = rec(b"raw", topic="clicks")  # undeclared: as read, the same object
    assert through(typing, other) is other


# A tombstone is never handed to the model: its value stays None (so does a None key).
# Caught: the None check dropped (the model was asked to validate None).
def test_a_tombstone_stays_none() -> None:
    typing = typing_of({"orders": eosflow.Topic(key=str, value=Order)})
    got = through(typing, rec(None, key=None))
    assert got.key is None and got.value is None


# What does not fit is a DecodeError of one line naming the side, the field's path and
# the first problem, with the rest counted. Caught: the location left out (the line said
# "value" only), the problems not counted.
def test_a_record_that_does_not_validate_names_the_field() -> None:
    typing = typing_of({"orders": eosflow.Topic(value=Order)})
    bad = b'{"id": 1, "items": [{"sku": "a", "qty": "two"}, {"qty": 1}]}'
    with pytest.raises(eosflow.DecodeError) as e:
        through(typing, rec(bad))
    err = e.value
    assert err.field == "value.items.0.qty" and err.expected == "Order"
    assert (err.topic, err.partition, err.offset) == ("orders", 0, 7)
    assert str(err).startswith("value.items.0.qty is not Order: Input should be a valid integer")
    assert str(err).endswith("(and 1 more)") and "\n" not in str(err)
    with pytest.raises(eosflow.DecodeError, match=r"^value is not Order: Invalid JSON"):
        through(typing, rec(b"{not json"))
    with pytest.raises(eosflow.DecodeError, match=r"^key is not str: UnicodeDecodeError"):
        through(typing_of({"orders": eosflow.Topic(key=str)}), rec(b"v", key=b"\xff"))


# The error policy's one line names the record and the field, and says it did not
# decode (not that the processor failed).
def test_the_fatal_line_names_the_record_and_the_field() -> None:
    typing = typing_of({"orders": eosflow.Topic(value=Order)})
    with pytest.raises(eosflow.DecodeError) as e:
        through(typing, rec(b'{"id": "x", "items": []}'))
    line = str(eosflow.ProcessingError("orders", 0, 7, e.value))
    assert line.startswith("record did not decode on orders[0]@7: DecodeError: value.id is not")


# Outputs: a model is written as its JSON, a str as UTF-8, bytes as they are; a
# declared output topic takes its own model only. Caught: the declared codec not
# applied (a wrong model's JSON went out unchecked).
def test_outputs_are_encoded_by_their_topic() -> None:
    typing = typing_of({"totals": eosflow.Topic(key=str, value=Item)}, inputs=())
    out = as_outputs(
        [
            eosflow.Output("totals", Item(sku="a", qty=3), key="c1"),
            eosflow.Output("elsewhere", Order(id=2, items=[])),
            eosflow.Output("elsewhere", b"raw", key="k"),
        ],
        typing.encode,
    )
    assert [(o.key, o.value) for o in out] == [
        (b"c1", b'{"sku":"a","qty":3}'),
        (None, b'{"id":2,"items":[]}'),
        (b"k", b"raw"),
    ]
    with pytest.raises(TypeError, match=r"Output for totals: Order given where Item is taken"):
        as_outputs(eosflow.Output("totals", Order(id=2, items=[])), typing.encode)
    with pytest.raises(TypeError, match=r"Output.value for x is int"):
        as_outputs(eosflow.Output("x", 42))


# An Output rebuilt with its key and value encoded keeps its headers, partition and
# timestamp, on a declared topic, an undeclared one (a str), and through normalised.
# Caught: the rebuilt Output given the topic, value and key alone.
def test_an_encoded_output_keeps_its_headers_partition_and_timestamp() -> None:
    typing = typing_of({"totals": eosflow.Topic(value=Item)}, inputs=())
    kept = {"headers": (("h", b"1"),), "partition": 3, "timestamp": 123}
    for o in (
        eosflow.Output("totals", Item(sku="a", qty=3), key=b"k", **kept),  # type: ignore[arg-type]
        eosflow.Output("elsewhere", "text", key="k", **kept),  # type: ignore[arg-type]
    ):
        for encoded in (typing.encode(o), normalised(o), normalised(o, typing.encode)):
            assert (encoded.headers, encoded.partition, encoded.timestamp) == (
                kept["headers"],
                3,
                123,
            ), (o, encoded)
            assert type(encoded.value) is bytes and encoded.key == b"k"


# A Model subclass's own loads is kept (the fast path takes a plain Model's validator
# alone). Caught: isinstance in loader (the subclass's loads skipped: a DecodeError).
def test_a_model_subclass_decodes_with_its_own_loads() -> None:
    class Prefixed(Model[Item]):
        def loads(self, data: bytes, /) -> Item:
            return super().loads(data.removeprefix(b"z:"))

    typing = typing_of({"orders": eosflow.Topic(value=Prefixed(Item))})

    async def process(r: eosflow.Record) -> Any:
        return r.value

    got = asyncio.run(typing.decoding(process)(rec(b'z:{"sku":"a","qty":1}')))  # type: ignore[arg-type]
    assert got == Item(sku="a", qty=1)


# A model round-trips through eosflow.Model, which is a Serde a store may hold too.
def test_model_is_a_serde() -> None:
    serde = eosflow.Model(Item)
    assert serde.loads(serde.dumps(Item(sku="a", qty=1))) == Item(sku="a", qty=1)
    with pytest.raises(eosflow.ConfigError, match=r"expected a pydantic model class"):
        eosflow.Model(dict)  # type: ignore[type-var]


# Declarations are checked in one line each.
@pytest.mark.parametrize(
    ("topics", "said"),
    [
        (
            {"orders": Order},
            r"Shop.topics\['orders'\] is <class .*Order.*>: expected eosflow.Topic",
        ),
        ({"orders": eosflow.Topic(value=int)}, r"Shop.topics\['orders'\].value is <class 'int'>"),
        ({"customers": eosflow.Topic(value=Order)}, r"'customers' is a table's topic"),
        (["orders"], r"Shop.topics is list: expected a dict"),
    ],
)
def test_a_wrong_declaration_is_one_line(topics: Any, said: str) -> None:
    with pytest.raises(eosflow.ConfigError, match=said):
        Typing("Shop", topics, ("orders",), {"customers": eosflow.Table("customers")})
