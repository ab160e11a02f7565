"""``eosflow.Avro``: a topic side in Avro, its schema in the registry (fastavro).

Decoding reads the body with the schema the record was written with (fetched by its id)
and resolves it into the declared one -- Avro's schema resolution: a field the writer
had and the reader has not is skipped, one the reader added takes its default -- then,
with a model, validates the record into it. Encoding dumps the model
(``model_dump()``: datetimes stay datetimes for Avro's logical types) and writes it
with the declared schema.

Without ``schema=``, the schema is derived from the model (``avro_schema_of``): ``str``
string, ``int`` long, ``float`` double, ``bool`` boolean, ``bytes`` bytes, ``datetime``
timestamp-micros, ``date`` date, a nested model a record, ``list[X]`` an array,
``dict[str, X]`` a map, a ``str`` enum or ``Literal`` of strings an enum, ``X | None`` a
union with null first (default null); a field's simple default is the schema's. Any
other type is a ``ConfigError`` naming the field: give the schema then.
"""

from __future__ import annotations

import datetime as dt
import enum
import io
import json
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .._errors import ConfigError
from ._client import Registry
from ._codec import Reader, SchemaCodec, Schemaful
from ._settings import needs
from ._wire import HEADER_SIZE

_PRIMITIVES: dict[object, str] = {
    str: "string",
    int: "long",
    float: "double",
    bool: "boolean",
    bytes: "bytes",
}


class Avro(Schemaful):
    """A topic's key or value in Avro through the schema registry: ``Avro(Order)`` (the
    schema derived from the model), ``Avro(Order, schema=AVSC)`` (the schema given, as
    JSON text or a dict) or ``Avro(schema=AVSC)`` (values as dicts)."""

    kind = "AVRO"

    def bind(self, registry: Registry, subject: str, where: str) -> SchemaCodec:
        fastavro = needs("fastavro")
        if self.schema is None:
            assert self.model is not None
            declared = avro_schema_of(self.model)
        else:
            try:
                declared = json.loads(self.schema) if isinstance(self.schema, str) else self.schema
                fastavro.parse_schema(declared, named_schemas={})
            except Exception as exc:
                raise ConfigError(f"{where}: not an Avro schema: {exc}") from None
        return _AvroCodec(self, registry, subject, declared)


class _AvroCodec(SchemaCodec):
    def __init__(
        self, declared: Avro, registry: Registry, subject: str, schema: dict[str, Any]
    ) -> None:
        super().__init__(declared, registry, subject, json.dumps(schema, separators=(",", ":")))
        self._avro = fastavro = needs("fastavro")
        self._schema = schema
        self._parsed = fastavro.parse_schema(schema, named_schemas={})
        self._write = fastavro.schemaless_writer
        model = declared.model
        # pydantic's compiled validator and serializer, called directly: model_validate
        # and model_dump add a Python frame each per record (measured ~0.4 us a record)
        self._validate = model.__pydantic_validator__.validate_python if model else None

    def encode(self, value: Any) -> bytes:
        out = io.BytesIO()
        datum = (
            value.__pydantic_serializer__.to_python(value)
            if isinstance(value, BaseModel)
            else value
        )
        self._write(out, self._parsed, datum)
        return out.getvalue()

    def reader(self, kind: str, text: str) -> Reader:
        written = json.loads(text)
        fastavro = self._avro
        writer = fastavro.parse_schema(written, named_schemas={})
        read_body = fastavro.schemaless_reader
        resolve = None if written == self._schema else self._parsed  # same: no resolution
        validate = self._validate

        def read(data: bytes) -> Any:
            datum = read_body(io.BytesIO(memoryview(data)[HEADER_SIZE:]), writer, resolve)
            return datum if validate is None else validate(datum)

        return read


def avro_schema_of(model: type[BaseModel], namespace: str | None = None) -> dict[str, Any]:
    """An Avro record schema of ``model`` (see the module doc for the types taken)."""
    return _record(model, namespace, set())


def _record(model: type[BaseModel], namespace: str | None, seen: set[str]) -> dict[str, Any]:
    seen.add(model.__name__)
    fields = []
    for name, info in model.model_fields.items():
        where = f"{model.__name__}.{name}"
        field: dict[str, Any] = {"name": name, "type": _type(info.annotation, where, seen)}
        default = info.default
        if default is not PydanticUndefined and info.default_factory is None:
            if isinstance(default, enum.Enum):
                default = default.value
            if default is None or isinstance(default, str | int | float | bool):
                field["default"] = default
        fields.append(field)
    schema: dict[str, Any] = {"type": "record", "name": model.__name__, "fields": fields}
    if namespace:
        schema["namespace"] = namespace
    return schema


def _type(kind: Any, where: str, seen: set[str]) -> Any:
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    if kind is dt.datetime:
        return {"type": "long", "logicalType": "timestamp-micros"}
    if kind is dt.date:
        return {"type": "int", "logicalType": "date"}
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return ["null", _type(rest[0], where, seen)]
    if origin is list and len(args) == 1:
        return {"type": "array", "items": _type(args[0], where, seen)}
    if origin is dict and len(args) == 2 and args[0] is str:
        return {"type": "map", "values": _type(args[1], where, seen)}
    if origin is typing.Literal and all(isinstance(a, str) for a in args):
        return {"type": "enum", "name": where.replace(".", "_"), "symbols": list(args)}
    if isinstance(kind, type) and issubclass(kind, enum.Enum) and issubclass(kind, str):
        if kind.__name__ in seen:
            return kind.__name__
        seen.add(kind.__name__)
        return {"type": "enum", "name": kind.__name__, "symbols": [m.value for m in kind]}
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return kind.__name__ if kind.__name__ in seen else _record(kind, None, seen)
    raise ConfigError(
        f"{where} is {kind!r}: no Avro type is derived for it; give the schema "
        "(eosflow.Avro(Model, schema=...))"
    )
