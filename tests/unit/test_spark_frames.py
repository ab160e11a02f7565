"""Typed frames without Spark: the Arrow table a typed ``SparkProcessor`` hands Spark
(a model's fields as columns, a tombstone's row null) and the outputs it builds from the
rows ``transform`` returns. The comment above each test names the mutation it caught."""

from __future__ import annotations

import datetime as dt
import enum

import pyarrow as pa
import pytest
from pydantic import BaseModel

import eosflow
from eosflow.spark._typed import Typed


class Kind(enum.StrEnum):
    A = "a"


class Item(BaseModel):
    sku: str
    qty: int


class Order(BaseModel):
    id: int
    at: dt.datetime
    kind: Kind
    items: list[Item]
    tags: dict[str, float]
    note: str | None = None


class Total(BaseModel):
    customer: str
    amount: int


def typed(**topics: eosflow.Topic) -> Typed:
    return Typed("P", topics, ("orders",), "totals")


# A model's fields become typed columns beside the record's own, and a tombstone's row
# is null in every field. Caught: the tombstone's row dropped (the rows then no longer
# line up with the batch's records, which the state frames index).
def test_a_typed_frame_has_the_models_fields_as_columns() -> None:
    t = typed(orders=eosflow.Topic(key=str, value=eosflow.Avro(Order)))
    at = dt.datetime(2026, 12, 2, 9, 0, tzinfo=dt.UTC)
    order = Order(id=1, at=at, kind=Kind.A, items=[Item(sku="x", qty=2)], tags={"w": 0.5})
    records = [
        eosflow.Record("orders", 0, 0, "c1", order, (("h", b"v"),), 1_000),
        eosflow.Record("orders", 0, 1, "c2", None, (), 2_000),
    ]
    table = t.to_arrow(records)
    assert table.column_names == [
        *("id", "at", "kind", "items", "tags", "note"),
        *("key", "topic", "partition", "offset", "timestamp", "headers"),
    ]
    schema = table.schema
    assert schema.field("id").type == pa.int64()
    assert schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("items").type == pa.list_(
        pa.struct([("sku", pa.string()), ("qty", pa.int64())])
    )
    assert schema.field("tags").type == pa.map_(pa.string(), pa.float64())
    assert schema.field("key").type == pa.string()
    rows = table.to_pylist()
    assert rows[0]["items"] == [{"sku": "x", "qty": 2}] and rows[0]["kind"] == "a"
    assert rows[0]["at"] == at and rows[0]["headers"] == [{"key": "h", "value": b"v"}]
    assert rows[1]["id"] is None and rows[1]["key"] == "c2" and rows[1]["offset"] == 1


def test_a_field_named_like_a_records_column_is_one_line() -> None:
    class Clash(BaseModel):
        key: str

    with pytest.raises(eosflow.ConfigError, match=r"Clash.key: a typed frame's field"):
        typed(orders=eosflow.Topic(value=Clash))


def test_inputs_of_different_models_are_refused() -> None:
    with pytest.raises(eosflow.ConfigError, match="must share one model"):
        Typed(
            "P",
            {"orders": eosflow.Topic(value=Order), "other": eosflow.Topic(value=Total)},
            ("orders", "other"),
            None,
        )


# The rows transform returns become the output model's instances. Caught: the rows
# handed on as dicts (not validated: a wrong type went through).
def test_rows_of_the_output_model_become_models() -> None:
    t = typed(orders=eosflow.Topic(value=Order), totals=eosflow.Topic(value=Total))
    out = pa.table({"key": ["c1"], "customer": ["c1"], "amount": [7]})
    [o] = t.outputs(out, "totals") or []
    assert o == eosflow.Output("totals", Total(customer="c1", amount=7), key="c1")
    with pytest.raises(ValueError, match=r"missing: \['amount'\]"):
        t.outputs(pa.table({"customer": ["c1"]}), "totals")
    with pytest.raises(Exception, match="amount"):
        t.outputs(pa.table({"customer": ["c1"], "amount": ["seven"]}), "totals")
    assert t.outputs(pa.table({"value": [b"raw"]}), "totals") is None  # the untyped form
