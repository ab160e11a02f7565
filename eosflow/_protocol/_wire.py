"""Kafka request/response versions that aiokafka 0.14 does not define.

aiokafka ships only v0 of the transaction APIs and OffsetFetch up to v3. eosflow needs
TxnOffsetCommit v3 (KIP-447 fencing by generation), OffsetFetch v7 (RequireStable),
InitProducerId v3/v4 (KIP-360 epoch bump) and ApiVersions v3 (the cluster's finalized
features, KIP-584: whether KIP-848 and transactions v2 are on), and the test cluster must
decode every version it advertises. Rather than write a second codec, the versions are
declared here the way Kafka's own JSON message specs declare them -- a field list with
version ranges -- and turned into aiokafka ``RequestStruct``/``Response`` classes built
from aiokafka's public protocol types. Flexible versions (KIP-482) get compact
strings/arrays and tagged fields automatically.

This module holds the machinery; the declarations themselves are in ``_specs``. Sending
them is the adapter's job (``_aiokafka``).
"""

from __future__ import annotations

import types
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from aiokafka.protocol.api import Request, RequestStruct, Response, ResponseHeader_v0
from aiokafka.protocol.types import (
    Array,
    Boolean,
    Bytes,
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Int64,
    Schema,
    String,
    TaggedFields,
    UnsignedVarInt32,
)

__all__ = [
    "Field",
    "MessageSpec",
    "SpecRequest",
    "finalized_features",
    "spec_classes",
    "to_values",
]

_SCALARS: dict[str, Any] = {
    "int8": Int8,
    "int16": Int16,
    "int32": Int32,
    "int64": Int64,
    "bool": Boolean,
}


class Uuid:
    """Kafka's ``uuid`` (16 bytes), as ``uuid.UUID``; the all-zero one is Kafka's null."""

    @staticmethod
    def encode(value: uuid.UUID | None) -> bytes:
        return (value or _ZERO_UUID).bytes

    @staticmethod
    def decode(data: BytesIO) -> uuid.UUID:
        raw = data.read(16)
        if len(raw) != 16:
            raise ValueError("Buffer underrun decoding a uuid")
        return uuid.UUID(bytes=raw)

    @staticmethod
    def repr(value: object) -> str:
        return str(value)


_ZERO_UUID = uuid.UUID(int=0)


class NullableStruct:
    """One nested struct that may be null (flexible versions: an int8 marker, -1 for
    null, then the struct)."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema

    def encode(self, value: Sequence[Any] | None) -> bytes:
        marker: bytes = Int8.encode(-1 if value is None else 1)
        return marker if value is None else marker + bytes(self.schema.encode(value))

    def decode(self, data: BytesIO) -> tuple[Any, ...] | None:
        if Int8.decode(data) < 0:
            return None
        return tuple(self.schema.decode(data))

    def repr(self, value: Any) -> str:
        return "NULL" if value is None else self.schema.repr(value)


@dataclass(frozen=True)
class One:
    """A field type: one nested struct of ``fields``; nullable (``NullableStruct``, its
    int8 marker first) unless ``nullable`` is False, as Kafka's specs say per field."""

    fields: tuple[Field, ...]
    nullable: bool = True


@dataclass(frozen=True)
class Field:
    """One field of a message spec: ``type`` is a scalar name, ``string``, ``bytes``,
    ``[]int32``-style scalar arrays, or a tuple of sub-fields for an array of structs."""

    name: str
    type: str | tuple[Field, ...] | One
    versions: tuple[int, int] = (0, 99)

    def present(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]


def field(
    name: str, type_: str | tuple[Field, ...] | One, since: int = 0, until: int = 99
) -> Field:
    return Field(name, type_, (since, until))


def _schema(fields: tuple[Field, ...], version: int, flexible: bool) -> Schema:
    parts: list[tuple[str, Any]] = []
    for fld in fields:
        if not fld.present(version):
            continue
        parts.append((fld.name, _type(fld.type, version, flexible)))
    if flexible:
        parts.append(("tags", TaggedFields))
    return Schema(*parts)


def _type(type_: str | tuple[Field, ...] | One, version: int, flexible: bool) -> Any:
    if isinstance(type_, One):
        struct = _schema(type_.fields, version, flexible)
        return NullableStruct(struct) if type_.nullable else struct
    if isinstance(type_, tuple):
        inner = _schema(type_, version, flexible)
        return CompactArray(inner) if flexible else Array(inner)
    if type_.startswith("[]"):
        elem = _SCALARS[type_[2:]] if type_[2:] in _SCALARS else _type(type_[2:], version, flexible)
        return CompactArray(elem) if flexible else Array(elem)
    if type_ == "string":
        return CompactString("utf-8") if flexible else String("utf-8")
    if type_ == "bytes":
        return CompactBytes if flexible else Bytes
    if type_ == "uuid":
        return Uuid
    return _SCALARS[type_]


@dataclass(frozen=True)
class MessageSpec:
    """A request/response pair across a range of versions, as in Kafka's JSON specs."""

    api_key: int
    name: str
    versions: tuple[int, int]
    flexible_from: int
    request: tuple[Field, ...]
    response: tuple[Field, ...]


_CLASS_CACHE: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {}


def spec_classes(spec: MessageSpec, version: int) -> tuple[type[RequestStruct], type[Response]]:
    """The (request, response) struct classes of ``spec`` at ``version``, built once."""
    key = (spec.api_key, version)
    cached = _CLASS_CACHE.get(key)
    if cached is not None:
        return cached
    if not spec.versions[0] <= version <= spec.versions[1]:
        raise ValueError(f"{spec.name} has no version {version}")
    flexible = version >= spec.flexible_from
    resp_cls = type(
        f"{spec.name}Response_v{version}",
        (Response,),
        {
            "API_KEY": spec.api_key,
            "API_VERSION": version,
            "SCHEMA": _schema(spec.response, version, flexible),
        },
    )
    attrs: dict[str, Any] = {
        "API_KEY": spec.api_key,
        "API_VERSION": version,
        "FLEXIBLE_VERSION": flexible,
        "RESPONSE_TYPE": resp_cls,
        "SCHEMA": _schema(spec.request, version, flexible),
    }
    if spec.api_key == API_VERSIONS_KEY:
        # a flexible ApiVersions request (header v2) is answered with response header v0:
        # a client that cannot parse the body must still read the correlation id
        attrs["parse_response_header"] = lambda self, buf: ResponseHeader_v0.decode(buf)
    req_cls = type(f"{spec.name}Request_v{version}", (RequestStruct,), attrs)
    _CLASS_CACHE[key] = (req_cls, resp_cls)
    return req_cls, resp_cls


# --- ApiVersions' features (KIP-584) ---------------------------------------------------

API_VERSIONS_KEY = 18

FINALIZED_FEATURES_TAG = 2


def finalized_features(tags: dict[int, bytes]) -> dict[str, int]:
    """The finalized features (name -> max version level) in an ApiVersions v3+ answer's
    tagged fields: a compact array of (name, max level, min level, tags). None there
    (an older broker, or none finalized): an empty dict."""
    raw = tags.get(FINALIZED_FEATURES_TAG)
    if not raw:
        return {}
    buf = BytesIO(raw)
    out: dict[str, int] = {}
    for _ in range(UnsignedVarInt32.decode(buf) - 1):
        name = CompactString("utf-8").decode(buf)
        max_level = Int16.decode(buf)
        Int16.decode(buf)  # min level
        TaggedFields.decode(buf)
        if name is not None:
            out[name] = max_level
    return out


def features_tags(finalized: dict[str, int], epoch: int = 1) -> dict[int, bytes]:
    """The tagged fields of an ApiVersions v3+ answer that finalize ``finalized`` (name ->
    level, each at min level 1) at ``epoch``, ready for aiokafka's ``TaggedFields.encode``,
    which writes each value as given: so each is length-prefixed here. For the test
    cluster; tag 0 (the supported features) is left out, as eosflow reads only tag 2."""
    body = UnsignedVarInt32.encode(len(finalized) + 1)
    for name, level in finalized.items():
        body += CompactString("utf-8").encode(name) + Int16.encode(level) + Int16.encode(1)
        body += UnsignedVarInt32.encode(0)  # no tags
    epoch_raw = Int64.encode(epoch)
    return {
        FINALIZED_FEATURES_TAG - 1: UnsignedVarInt32.encode(len(epoch_raw)) + epoch_raw,
        FINALIZED_FEATURES_TAG: UnsignedVarInt32.encode(len(body)) + body,
    }


# --- dicts to structs ------------------------------------------------------------------

_MISSING = object()


def to_values(schema: Schema, obj: dict[str, Any]) -> list[Any]:
    """The positional values of ``schema`` taken from a (nested) dict: fields the dict
    lacks get neutral defaults (0, False, None, empty array, no tags); an array given as
    None is null; keys the schema lacks are ignored. This is what lets one dict serve
    every version of a message."""
    return [
        _convert(typ, obj.get(name, _MISSING))
        for name, typ in zip(schema.names, schema.fields, strict=True)
    ]


def _convert(typ: Any, val: Any) -> Any:
    if isinstance(typ, NullableStruct):
        return None if val is _MISSING or val is None else tuple(to_values(typ.schema, val))
    if isinstance(typ, Schema):
        return tuple(to_values(typ, val if val is not _MISSING else {}))
    if isinstance(typ, Array):  # CompactArray is an Array too
        if val is _MISSING:
            return []
        if val is None:
            return None  # Kafka's null array (where the spec lets it be null)
        inner = typ.array_of
        if isinstance(inner, Schema):
            return [tuple(to_values(inner, item)) for item in val]
        return list(val)
    if val is not _MISSING:
        return val
    if typ is TaggedFields:
        return {}
    if typ in (Int8, Int16, Int32, Int64):
        return 0
    if typ is Boolean:
        return False
    return None  # strings and bytes


class SpecRequest:
    """A request of a spec'd API whose version is negotiated per connection, like
    aiokafka's own request builders: ``SpecRequest.of(spec, body, min_version=3)``; a
    ``max_version`` keeps a caller on the semantics it handles (e.g. TxnOffsetCommit v3
    until transactions v2)."""

    @staticmethod
    def of(
        spec: MessageSpec,
        body: dict[str, Any],
        min_version: int | None = None,
        max_version: int | None = None,
    ) -> Any:
        low = spec.versions[0] if min_version is None else min_version
        high = spec.versions[1] if max_version is None else max_version
        classes = tuple(spec_classes(spec, v)[0] for v in range(low, high + 1))
        cls = _REQUEST_BUILDERS.get((spec.api_key, low, high))
        if cls is None:
            cls = types.new_class(
                f"{spec.name}Request",
                (Request[Any],),
                exec_body=lambda ns: ns.update(
                    API_KEY=spec.api_key,
                    build=lambda self, struct_cls: struct_cls(
                        *to_values(struct_cls.SCHEMA, self.body)
                    ),
                ),
            )
            cls._CLASSES = classes  # type: ignore[attr-defined]
            _REQUEST_BUILDERS[(spec.api_key, low, high)] = cls
        req = cls.__new__(cls)  # type: ignore[call-overload]
        req.body = body
        return req


_REQUEST_BUILDERS: dict[tuple[int, int, int], Any] = {}
