"""Typed frames: a ``SparkProcessor`` over typed topics sees a model's fields as columns.

When the app's input topics are declared with one pydantic model (``Topic(value=Order)``,
``eosflow.Model(Order)``, ``eosflow.Avro(Order)``, ``eosflow.JsonSchema(Order)``), the
DataFrame ``transform`` gets has, instead of a binary ``value``, one column per field of
the model -- ``int`` long, ``float`` double, ``str`` string, ``bool`` boolean, ``bytes``
binary, ``datetime`` timestamp (UTC), ``date`` date, a nested model a struct,
``list[X]`` an array, ``dict[str, X]`` a map, a ``StrEnum`` or ``Literal`` of strings a
string, ``X | None`` nullable -- beside ``key`` (string when the key is declared
``str``, else binary), ``topic``, ``partition``, ``offset``, ``timestamp`` and
``headers``. A tombstone's row has every field null. A field named like one of those
columns is refused in one line (``ConfigError``), as is any type not listed.

When ``output_topic`` is declared with a model, ``transform`` may return that model's
fields as columns (with ``key``, ``topic``, ``partition``, ``headers`` as before, and no
``value``): each row is validated into the model, which the topic's declaration then
encodes. Built from the models' dumps through Arrow: no pandas on the way.
"""

from __future__ import annotations

import datetime as dt
import enum
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from .._errors import ConfigError
from .._records import Output, Record
from .._typed import Topic, declared_model
from ._arrow import HEADER_TYPE, INPUT_SCHEMA, OUTPUT_COLUMNS

_META = tuple(n for n in INPUT_SCHEMA.names if n != "value")
_PRIMITIVES: dict[object, pa.DataType] = {
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bool: pa.bool_(),
    bytes: pa.binary(),
    dt.datetime: pa.timestamp("us", tz="UTC"),
    dt.date: pa.date32(),
}


class Typed:
    """What a ``SparkProcessor`` reads and writes as models: ``model`` (its inputs'),
    ``output`` (its ``output_topic``'s, or None), ``key_str`` (keys declared ``str``)."""

    def __init__(
        self,
        processor: str,
        topics: Mapping[str, Topic],
        inputs: Sequence[str],
        output_topic: str | None,
    ) -> None:
        models = {t: _model(topics.get(t), "value") for t in inputs}
        kinds = {m for m in models.values()}
        self.model: type[BaseModel] | None = None
        if kinds != {None}:
            if len(kinds) > 1:
                named = ", ".join(
                    f"{t}: {getattr(m, '__name__', 'bytes')}" for t, m in models.items()
                )
                raise ConfigError(
                    f"{processor}: a SparkProcessor's input topics must share one model "
                    f"to be one frame ({named})"
                )
            self.model = next(iter(kinds))
            assert self.model is not None
            self.schema = _fields_schema(self.model)
            self.key_str = all(
                (t := topics.get(name)) is not None and t.key is str for name in inputs
            )
        out = topics.get(output_topic) if output_topic is not None else None
        self.output = _model(out, "value")

    def to_arrow(self, records: Sequence[Record]) -> pa.Table:
        """The batch as the typed frame (see the module doc), rows in ``records``' order."""
        assert self.model is not None
        model = self.model
        rows: list[dict[str, Any]] = [
            r.value.model_dump() if isinstance(r.value, model) else {} for r in records
        ]
        fields = pa.Table.from_pylist(rows, schema=self.schema)
        key_type = pa.string() if self.key_str else pa.binary()
        meta = [
            ("key", pa.array([r.key for r in records], key_type)),
            ("topic", pa.array([r.topic for r in records], pa.string())),
            ("partition", pa.array([r.partition for r in records], pa.int32())),
            ("offset", pa.array([r.offset for r in records], pa.int64())),
            (
                "timestamp",
                pa.array(
                    [r.timestamp if r.timestamp >= 0 else None for r in records],
                    pa.timestamp("ms", tz="UTC"),
                ),
            ),
            ("headers", pa.array([list(r.headers) for r in records], HEADER_TYPE)),
        ]
        columns = [*fields.columns, *(c for _, c in meta)]
        names = [*fields.column_names, *(n for n, _ in meta)]
        return pa.table(columns, names=names)

    def outputs(self, table: pa.Table, default_topic: str | None) -> list[Output] | None:
        """``transform``'s rows as outputs of models, if it returned the output model's
        fields (no ``value`` column); None: the untyped form applies."""
        model = self.output
        if model is None or "value" in table.column_names:
            return None
        names = table.column_names
        fields = [n for n in names if n not in OUTPUT_COLUMNS]
        missing = [
            f for f in model.model_fields if f not in fields and model.model_fields[f].is_required()
        ]
        extra = [f for f in fields if f not in model.model_fields]
        if missing or extra:
            raise ValueError(
                f"transform() returned columns {names}: as {model.__name__} rows it must "
                f"return its fields (missing: {missing}; not its: {extra}) and may return "
                f"{list(OUTPUT_COLUMNS[1:])}"
            )
        validate = model.model_validate
        values = [validate(row) for row in table.select(fields).to_pylist()]
        n = table.num_rows
        keys = table.column("key").to_pylist() if "key" in names else [None] * n
        topics: list[Any] = (
            table.column("topic").to_pylist() if "topic" in names else [default_topic] * n
        )
        parts = table.column("partition").to_pylist() if "partition" in names else [None] * n
        headers = (
            [
                tuple((h["key"], h["value"]) for h in hs or ())
                for hs in table.column("headers").to_pylist()
            ]
            if "headers" in names
            else [()] * n
        )
        if None in topics and default_topic is None:
            raise ValueError("transform() output has rows without a topic and no output_topic")
        topics = [default_topic if t is None else t for t in topics]
        return [
            Output(t, v, key=k, headers=h, partition=p)
            for t, v, k, h, p in zip(topics, values, keys, headers, parts, strict=True)
        ]


def _model(topic: Topic | None, side: str) -> type[BaseModel] | None:
    if topic is None:
        return None
    return declared_model(getattr(topic, side))


def _fields_schema(model: type[BaseModel]) -> pa.Schema:
    taken = [f for f in model.model_fields if f in _META]
    if taken:
        raise ConfigError(
            f"{model.__name__}.{taken[0]}: a typed frame's field may not be named like the "
            f"record's own columns {list(_META)}"
        )
    return pa.schema(
        [
            pa.field(name, _type(info.annotation, f"{model.__name__}.{name}"))
            for name, info in model.model_fields.items()
        ]
    )


def _type(kind: Any, where: str) -> pa.DataType:
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _type(rest[0], where)  # every Arrow field is nullable
    if origin is list and len(args) == 1:
        return pa.list_(_type(args[0], where))
    if origin is dict and len(args) == 2 and args[0] is str:
        return pa.map_(pa.string(), _type(args[1], where))
    if origin is typing.Literal and all(isinstance(a, str) for a in args):
        return pa.string()
    if isinstance(kind, type) and issubclass(kind, enum.Enum) and issubclass(kind, str):
        return pa.string()
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return pa.struct(
            [pa.field(n, _type(i.annotation, f"{where}.{n}")) for n, i in kind.model_fields.items()]
        )
    raise ConfigError(f"{where} is {kind!r}: no column type is derived for it in a typed frame")
