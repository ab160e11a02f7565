"""Request decoding and response encoding for the test cluster, on aiokafka's structs.

Every (api key, version) the cluster accepts maps to a request struct class and its
response class: aiokafka's own, overridden by the ones eosflow declares in ``_wire`` (so
one declaration serves client and server). Handlers work on plain dicts; a response dict
is encoded by walking the response schema of the negotiated version, so one handler
serves every version (fields a version lacks are dropped, fields it has but the handler
did not set get neutral defaults).
"""

from __future__ import annotations

import importlib
import inspect
import struct
from io import BytesIO
from typing import Any, cast

from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.struct import Struct
from aiokafka.protocol.types import Array, Schema, String, TaggedFields, UnsignedVarInt32

from .._protocol import codes, specs, wire

_MODULES = (
    "admin",
    "commit",
    "coordination",
    "fetch",
    "group",
    "metadata",
    "offset",
    "produce",
    "transaction",
)


def _registry() -> dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]]:
    reg: dict[tuple[int, int], tuple[type[RequestStruct], type[Response]]] = {}
    for name in _MODULES:
        mod = importlib.import_module(f"aiokafka.protocol.{name}")
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            cls = cast(Any, cls)
            if (
                issubclass(cls, RequestStruct)
                and cls is not RequestStruct
                and cls.__module__ == mod.__name__
                and isinstance(cls.__dict__.get("API_VERSION"), int)
            ):
                # the class name's _vN is the version: aiokafka's ListGroupsRequest_v2
                # claims API_VERSION 1, and its DescribeGroupsRequest_v3 answers with the
                # v2 response (whose schema v3 shares), so neither attribute is trusted
                suffix = cls.__name__.rpartition("_v")[2]
                version = int(suffix) if suffix.isdigit() else cls.API_VERSION
                reg[(cls.API_KEY, version)] = (cls, _response(cls.RESPONSE_TYPE, version))
    for spec in specs.SPECS.values():
        for v in range(spec.versions[0], spec.versions[1] + 1):
            reg[(spec.api_key, v)] = wire.spec_classes(spec, v)
    return reg


def _response(given: type[Response], version: int) -> type[Response]:
    """The response class of ``version``: ``given``, or its sibling named ``_v<version>``
    in the same module when ``given`` is another version's."""
    if given.API_VERSION == version:
        return given
    module = importlib.import_module(given.__module__)
    name = given.__name__.rpartition("_v")[0] + f"_v{version}"
    sibling = getattr(module, name, None)
    return cast(type[Response], sibling) if sibling is not None else given


REGISTRY = _registry()

API_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    17: "SaslHandshake",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    22: "InitProducerId",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    28: "TxnOffsetCommit",
    32: "DescribeConfigs",
    36: "SaslAuthenticate",
    65: "DescribeTransactions",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
}
API_KEYS = {name: key for key, name in API_NAMES.items()}


def implemented_versions(api_key: int) -> list[int]:
    return sorted(v for (k, v) in REGISTRY if k == api_key)


class Frame:
    """A decoded request: header fields plus the body as a dict."""

    __slots__ = ("api_key", "body", "client_id", "correlation_id", "flexible", "version")

    def __init__(
        self,
        api_key: int,
        version: int,
        correlation_id: int,
        client_id: str | None,
        flexible: bool,
        body: dict[str, Any],
    ) -> None:
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.flexible = flexible
        self.body = body

    @property
    def api_name(self) -> str:
        return API_NAMES.get(self.api_key, str(self.api_key))


class UnsupportedRequest(Exception):
    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported api {api_key} v{version}")
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


_HEAD = struct.Struct(">hhi")


def decode_request(data: bytes) -> Frame:
    """Decode one request frame (without its length prefix). Raises ``UnsupportedRequest``
    for an unknown API or version, ``ValueError`` for a malformed frame (one too short for
    its fields); bytes after the body are ignored, as Kafka ignores them."""
    if len(data) < _HEAD.size + 2:
        raise ValueError("frame shorter than a request header")
    api_key, version, corr = _HEAD.unpack_from(data, 0)
    buf = BytesIO(data)
    buf.seek(_HEAD.size)
    client_id = String("utf-8").decode(buf)
    classes = REGISTRY.get((api_key, version))
    if classes is None:
        raise UnsupportedRequest(api_key, version, corr)
    req_cls = classes[0]
    flexible = bool(req_cls.FLEXIBLE_VERSION)
    if flexible:
        TaggedFields.decode(buf)
    req = req_cls.decode(buf)
    # Bytes past the body are ignored, as Kafka's own request parsing does: librdkafka 2.12
    # sends Metadata v12 with three of them (its 'all topics' request), which genuine Kafka
    # answers and this cluster used to refuse by closing the connection.
    nullable = {
        name for (key, name), since in NULLABLE_FROM.items() if key == api_key and version >= since
    }
    body = _to_object(req_cls.SCHEMA, req, nullable)
    return Frame(api_key, version, corr, client_id, flexible, body)


# Request arrays of structs that Kafka's message specs let be null, from which version:
# (api key, field) -> first version. A null anywhere else is a malformed request, as
# Kafka's generated readers throw for a non-nullable field serialized as null.
NULLABLE_FROM = {
    (9, "topics"): 2,  # OffsetFetch: null asks for every partition with a committed offset
    (9, "groups.topics"): 8,  # the same per group (the Java admin's listConsumerGroupOffsets)
    (3, "topics"): 1,  # Metadata: null asks for every topic
    (68, "topic_partitions"): 0,  # ConsumerGroupHeartbeat: null, owned partitions unchanged
}


def _to_object(
    schema: Schema, data: Struct | tuple[Any, ...], nullable: set[str], path: str = ""
) -> dict[str, Any]:
    """A decoded struct as a dict, like aiokafka's ``to_object`` but keeping a null
    array of structs as None where ``nullable`` names the field by its dotted path from
    the top (``topics``, ``groups.topics``)."""
    obj: dict[str, Any] = {}
    for idx, (name, type_) in enumerate(zip(schema.names, schema.fields, strict=True)):
        val = data.get_item(name) if isinstance(data, Struct) else data[idx]
        full = path + name
        if isinstance(type_, Schema):
            val = _to_object(type_, val, nullable, full + ".")
        elif isinstance(type_, Array) and isinstance(type_.array_of, Schema):
            if val is None:
                if full not in nullable:
                    raise ValueError(f"non-nullable field {full} was serialized as null")
            else:
                val = [_to_object(type_.array_of, x, nullable, full + ".") for x in val]
        obj[name] = val
    return obj


def encode_response(frame: Frame, body: dict[str, Any]) -> bytes:
    """Length-prefixed response frame for ``frame`` carrying ``body``."""
    resp_cls = REGISTRY[(frame.api_key, frame.version)][1]
    header = struct.pack(">i", frame.correlation_id)
    if frame.flexible and frame.api_key != 18:  # ApiVersions always answers with header v0
        header += UnsignedVarInt32.encode(0)
    payload = resp_cls.SCHEMA.encode(wire.to_values(resp_cls.SCHEMA, body))
    out: bytes = struct.pack(">i", len(header) + len(payload)) + header + payload
    return out


def encode_api_versions_error(correlation_id: int, versions: list[tuple[int, int, int]]) -> bytes:
    """ApiVersions v0 body with UNSUPPORTED_VERSION, Kafka's answer to a too-new version."""
    resp_cls = REGISTRY[(18, 0)][1]
    body = {
        "error_code": codes.UNSUPPORTED_VERSION,
        "api_versions": [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in versions
        ],
    }
    payload = struct.pack(">i", correlation_id) + resp_cls.SCHEMA.encode(
        wire.to_values(resp_cls.SCHEMA, body)
    )
    frame: bytes = struct.pack(">i", len(payload)) + payload
    return frame


def response_schema(api_key: int, version: int) -> Schema:
    schema: Schema = REGISTRY[(api_key, version)][1].SCHEMA
    return schema
