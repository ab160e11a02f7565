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

This module only *declares* structures; sending them is the adapter's job (``_aiokafka``).
"""

from __future__ import annotations

import types
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
    "API_VERSIONS",
    "SPECS",
    "Field",
    "MessageSpec",
    "SpecRequest",
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


@dataclass(frozen=True)
class Field:
    """One field of a message spec: ``type`` is a scalar name, ``string``, ``bytes``,
    ``[]int32``-style scalar arrays, or a tuple of sub-fields for an array of structs."""

    name: str
    type: str | tuple[Field, ...]
    versions: tuple[int, int] = (0, 99)

    def present(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]


def _f(name: str, type_: str | tuple[Field, ...], since: int = 0, until: int = 99) -> Field:
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


def _type(type_: str | tuple[Field, ...], version: int, flexible: bool) -> Any:
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


# --- The specs (field names follow aiokafka's snake_case habit) -------------------------

_OFFSET_COMMIT_PARTITION_RESP = (_f("partition_index", "int32"), _f("error_code", "int16"))

TXN_OFFSET_COMMIT = MessageSpec(
    api_key=28,
    name="TxnOffsetCommit",
    versions=(0, 3),
    flexible_from=3,
    request=(
        _f("transactional_id", "string"),
        _f("group_id", "string"),
        _f("producer_id", "int64"),
        _f("producer_epoch", "int16"),
        _f("generation_id", "int32", since=3),
        _f("member_id", "string", since=3),
        _f("group_instance_id", "string", since=3),
        _f(
            "topics",
            (
                _f("name", "string"),
                _f(
                    "partitions",
                    (
                        _f("partition_index", "int32"),
                        _f("committed_offset", "int64"),
                        _f("committed_leader_epoch", "int32", since=2),
                        _f("committed_metadata", "string"),
                    ),
                ),
            ),
        ),
    ),
    response=(
        _f("throttle_time_ms", "int32"),
        _f("topics", (_f("name", "string"), _f("partitions", _OFFSET_COMMIT_PARTITION_RESP))),
    ),
)

OFFSET_FETCH = MessageSpec(
    api_key=9,
    name="OffsetFetch",
    versions=(1, 7),
    flexible_from=6,
    request=(
        _f("group_id", "string"),
        _f("topics", (_f("name", "string"), _f("partition_indexes", "[]int32"))),
        _f("require_stable", "bool", since=7),
    ),
    response=(
        _f("throttle_time_ms", "int32", since=3),
        _f(
            "topics",
            (
                _f("name", "string"),
                _f(
                    "partitions",
                    (
                        _f("partition_index", "int32"),
                        _f("committed_offset", "int64"),
                        _f("committed_leader_epoch", "int32", since=5),
                        _f("metadata", "string"),
                        _f("error_code", "int16"),
                    ),
                ),
            ),
        ),
        _f("error_code", "int16", since=2),
    ),
)

INIT_PRODUCER_ID = MessageSpec(
    api_key=22,
    name="InitProducerId",
    versions=(0, 4),
    flexible_from=2,
    request=(
        _f("transactional_id", "string"),
        _f("transaction_timeout_ms", "int32"),
        _f("producer_id", "int64", since=3),
        _f("producer_epoch", "int16", since=3),
    ),
    response=(
        _f("throttle_time_ms", "int32"),
        _f("error_code", "int16"),
        _f("producer_id", "int64"),
        _f("producer_epoch", "int16"),
    ),
)

HEARTBEAT = MessageSpec(
    api_key=12,
    name="Heartbeat",
    versions=(0, 4),
    flexible_from=4,
    request=(
        _f("group_id", "string"),
        _f("generation_id", "int32"),
        _f("member_id", "string"),
        _f("group_instance_id", "string", since=3),
    ),
    response=(_f("throttle_time_ms", "int32", since=1), _f("error_code", "int16")),
)

_TXN_SIMPLE_RESP = (_f("throttle_time_ms", "int32"), _f("error_code", "int16"))

END_TXN = MessageSpec(
    api_key=26,
    name="EndTxn",
    versions=(0, 2),
    flexible_from=3,
    request=(
        _f("transactional_id", "string"),
        _f("producer_id", "int64"),
        _f("producer_epoch", "int16"),
        _f("transaction_result", "bool"),
    ),
    response=_TXN_SIMPLE_RESP,
)

ADD_OFFSETS_TO_TXN = MessageSpec(
    api_key=25,
    name="AddOffsetsToTxn",
    versions=(0, 2),
    flexible_from=3,
    request=(
        _f("transactional_id", "string"),
        _f("producer_id", "int64"),
        _f("producer_epoch", "int16"),
        _f("group_id", "string"),
    ),
    response=_TXN_SIMPLE_RESP,
)

ADD_PARTITIONS_TO_TXN = MessageSpec(
    api_key=24,
    name="AddPartitionsToTxn",
    versions=(0, 2),
    flexible_from=3,
    request=(
        _f("transactional_id", "string"),
        _f("producer_id", "int64"),
        _f("producer_epoch", "int16"),
        _f("topics", (_f("name", "string"), _f("partitions", "[]int32"))),
    ),
    response=(
        _f("throttle_time_ms", "int32"),
        _f(
            "results",
            (
                _f("name", "string"),
                _f("results", (_f("partition_index", "int32"), _f("error_code", "int16"))),
            ),
        ),
    ),
)

# JoinGroup and SyncGroup keep aiokafka's field names, so the test cluster's handlers read
# every version alike; aiokafka itself defines only some of these versions.
JOIN_GROUP = MessageSpec(
    api_key=11,
    name="JoinGroup",
    versions=(0, 5),
    flexible_from=6,
    request=(
        _f("group", "string"),
        _f("session_timeout", "int32"),
        _f("rebalance_timeout", "int32", since=1),
        _f("member_id", "string"),
        _f("group_instance_id", "string", since=5),
        _f("protocol_type", "string"),
        _f("group_protocols", (_f("protocol_name", "string"), _f("protocol_metadata", "bytes"))),
    ),
    response=(
        _f("throttle_time_ms", "int32", since=2),
        _f("error_code", "int16"),
        _f("generation_id", "int32"),
        _f("group_protocol", "string"),
        _f("leader_id", "string"),
        _f("member_id", "string"),
        _f(
            "members",
            (
                _f("member_id", "string"),
                _f("group_instance_id", "string", since=5),
                _f("member_metadata", "bytes"),
            ),
        ),
    ),
)

SYNC_GROUP = MessageSpec(
    api_key=14,
    name="SyncGroup",
    versions=(0, 3),
    flexible_from=4,
    request=(
        _f("group", "string"),
        _f("generation_id", "int32"),
        _f("member_id", "string"),
        _f("group_instance_id", "string", since=3),
        _f("group_assignment", (_f("member_id", "string"), _f("member_metadata", "bytes"))),
    ),
    response=(
        _f("throttle_time_ms", "int32", since=1),
        _f("error_code", "int16"),
        _f("member_assignment", "bytes"),
    ),
)

# aiokafka's own ListOffsets v4/v5 classes declare current_leader_epoch as int64 (Kafka's
# spec: int32); aiokafka never sends them, but other clients (librdkafka) do.
LIST_OFFSETS = MessageSpec(
    api_key=2,
    name="ListOffsets",
    versions=(1, 5),
    flexible_from=6,
    request=(
        _f("replica_id", "int32"),
        _f("isolation_level", "int8", since=2),
        _f(
            "topics",
            (
                _f("topic", "string"),
                _f(
                    "partitions",
                    (
                        _f("partition", "int32"),
                        _f("current_leader_epoch", "int32", since=4),
                        _f("timestamp", "int64"),
                    ),
                ),
            ),
        ),
    ),
    response=(
        _f("throttle_time_ms", "int32", since=2),
        _f(
            "topics",
            (
                _f("topic", "string"),
                _f(
                    "partitions",
                    (
                        _f("partition", "int32"),
                        _f("error_code", "int16"),
                        _f("timestamp", "int64"),
                        _f("offset", "int64"),
                        _f("leader_epoch", "int32", since=4),
                    ),
                ),
            ),
        ),
    ),
)

API_VERSIONS_KEY = 18

API_VERSIONS = MessageSpec(
    api_key=API_VERSIONS_KEY,
    name="ApiVersions",
    versions=(0, 3),
    flexible_from=3,
    request=(
        _f("client_software_name", "string", since=3),
        _f("client_software_version", "string", since=3),
    ),
    response=(
        _f("error_code", "int16"),
        _f(
            "api_versions",
            (_f("api_key", "int16"), _f("min_version", "int16"), _f("max_version", "int16")),
        ),
        _f("throttle_time_ms", "int32", since=1),
    ),
)
"""ApiVersions. From v3 (KIP-511; Kafka 2.4+) the answer's tagged fields carry the
cluster's features (KIP-584): tag 0 SupportedFeatures, 1 FinalizedFeaturesEpoch, 2
FinalizedFeatures (``finalized_features`` reads it) -- e.g. ``group.version`` 1 where
the consumer group protocol (KIP-848) is enabled, ``transaction.version`` 2 where
transactions v2 (KIP-890) are."""

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


SPECS: dict[int, MessageSpec] = {
    s.api_key: s
    for s in (
        API_VERSIONS,
        TXN_OFFSET_COMMIT,
        OFFSET_FETCH,
        INIT_PRODUCER_ID,
        HEARTBEAT,
        END_TXN,
        ADD_OFFSETS_TO_TXN,
        ADD_PARTITIONS_TO_TXN,
        JOIN_GROUP,
        SYNC_GROUP,
        LIST_OFFSETS,
    )
}
"""The specs eosflow declares itself, by API key. They take precedence over aiokafka's
classes in the test cluster, so one declaration serves the client side and the server side."""


# --- dicts to structs ------------------------------------------------------------------

_MISSING = object()


def to_values(schema: Schema, obj: dict[str, Any]) -> list[Any]:
    """The positional values of ``schema`` taken from a (nested) dict: fields the dict
    lacks get neutral defaults (0, False, None, empty array, no tags); keys the schema
    lacks are ignored. This is what lets one dict serve every version of a message."""
    return [
        _convert(typ, obj.get(name, _MISSING))
        for name, typ in zip(schema.names, schema.fields, strict=True)
    ]


def _convert(typ: Any, val: Any) -> Any:
    if isinstance(typ, Schema):
        return tuple(to_values(typ, val if val is not _MISSING else {}))
    if isinstance(typ, Array):  # CompactArray is an Array too
        if val is _MISSING or val is None:
            return []
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
    aiokafka's own request builders: ``SpecRequest.of(spec, body, min_version=3)``."""

    @staticmethod
    def of(spec: MessageSpec, body: dict[str, Any], min_version: int | None = None) -> Any:
        low = spec.versions[0] if min_version is None else min_version
        classes = tuple(spec_classes(spec, v)[0] for v in range(low, spec.versions[1] + 1))
        cls = _REQUEST_BUILDERS.get((spec.api_key, low))
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
            _REQUEST_BUILDERS[(spec.api_key, low)] = cls
        req = cls.__new__(cls)  # type: ignore[call-overload]
        req.body = body
        return req


_REQUEST_BUILDERS: dict[tuple[int, int], Any] = {}
