"""The Confluent wire format: a zero magic byte and the schema's registry id (4 bytes,
big-endian) before the body. Avro's and JSON Schema's bodies follow at once; Protobuf's
(not handled yet) would carry message indexes first."""

from __future__ import annotations

import struct

MAGIC = 0
_HEADER = struct.Struct(">bI")
HEADER_SIZE = _HEADER.size  # 5


class NotFramed(ValueError):
    """The bytes do not start with the wire format's header."""


def frame(schema_id: int) -> bytes:
    """The header of a body written with schema ``schema_id``."""
    return _HEADER.pack(MAGIC, schema_id)


def schema_id_of(data: bytes) -> int:
    """The schema id ``data`` was written with, or ``NotFramed``."""
    if len(data) < HEADER_SIZE:
        raise NotFramed(f"{len(data)} bytes: too short for the schema registry's header")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise NotFramed(f"magic byte {magic}, not 0: not written with a schema registry")
    return int(schema_id)
