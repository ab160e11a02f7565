"""The Confluent wire format: a zero magic byte and the schema's registry id (4 bytes,
big-endian) before the body. Avro's and JSON Schema's bodies follow at once; Protobuf's
carry the message indexes first: the path of the message type within its ``.proto``
file (``[0]`` its first message, ``[1, 0]`` the first message nested in the second),
written as zigzag varints -- their count, then each index -- with ``[0]`` written as the
single byte 0 (a count of 0 reads as ``[0]``)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

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


def message_indexes(path: Sequence[int]) -> bytes:
    """The message indexes of the message type at ``path`` (``[0]``: the byte 0)."""
    if list(path) == [0]:
        return b"\x00"
    out = bytearray()
    for n in (len(path), *path):
        zigzag = (n << 1) ^ (n >> 63)
        while zigzag > 0x7F:
            out.append(zigzag & 0x7F | 0x80)
            zigzag >>= 7
        out.append(zigzag)
    return bytes(out)


def read_message_indexes(data: bytes, at: int = HEADER_SIZE) -> tuple[list[int], int]:
    """The message indexes written at ``at`` and where the body after them starts;
    ``ValueError`` if they are cut short or their count is negative."""
    count, at = _zigzag_varint(data, at)
    if count == 0:
        return [0], at
    if count < 0 or count > len(data) - at:
        raise ValueError(f"message indexes: a count of {count} does not fit the record")
    path = []
    for _ in range(count):
        index, at = _zigzag_varint(data, at)
        path.append(index)
    return path, at


def _zigzag_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("message indexes: cut short")
        if shift > 63:
            raise ValueError("message indexes: a varint longer than 64 bits")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at
