"""The hot paths in Python: what ``_hot`` compiles, step for step.

The face falls back to these where the extension is not built (a source tree used
without installing it, a machine without a C compiler); the differential tests
(``tests/unit/test_native.py``) hold the compiled functions to them over random inputs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._records import Output, Record

_M, _MASK = 0x5BD1E995, 0xFFFFFFFF
_NO_HEADERS: list[tuple[str, bytes]] = []  # shared, never mutated
_batch_type: list[type[Any]] = []  # the adapter's batch class (``bind_batch``)


class Corrupt(ValueError):
    """A record batch ``decode_batch`` cannot read: it runs past its fetch or its fields
    past its records, or it is not an uncompressed v2 batch."""


class Oversize(Exception):
    """``fill`` appended the output at ``index``, and its record is ``size`` bytes, over
    the call's ``max_bytes``: it can never be produced."""

    def __init__(self, index: int, size: int) -> None:
        super().__init__(index, size)
        self.index, self.size = index, size


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` (``Utils.murmur2`` of the Java client: seed
    0x9747b28c), an unsigned 32-bit value, as aiokafka's ``murmur2`` gives it."""
    n = len(data)
    h = 0x9747B28C ^ n
    words = n >> 2
    if words:
        for k in struct.unpack_from(f"<{words}I", data):
            k = (k * _M) & _MASK
            k = ((k ^ (k >> 24)) * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = n & 3
    if tail:
        i = words << 2
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h = ((h ^ data[i]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


_hashes: dict[bytes, int] = {}  # keys seen lately, up to _HASHED of them: no hashing
_HASHED, _HASHED_KEY_BYTES = 32_768, 128  # emptied when full; longer keys never kept


def bind_store(
    store_type: type,
    layers_type: type,
    writes_type: type,
    missing: object,
    reserved: bytes,
    store_key: Callable[[Any], bytes],
    json: object,
    python: Mapping[str, Callable[..., Any]],
) -> dict[str, Callable[..., Any]] | None:
    """Compiled versions of ``Store``'s point reads and writes (``raw``, ``get``, ``put``,
    ``_set``) over ``python``, its methods: here, none -- those methods are the Python
    steps, and stay."""
    return None


def bind_table(table_type: type, python_get: Callable[..., Any]) -> Callable[..., Any] | None:
    """A compiled ``TableStore.get`` over ``python_get``, the Python one: here, none."""
    return None


def bind_window(
    window_type: type, python: Mapping[str, Callable[..., Any]]
) -> dict[str, Callable[..., Any]] | None:
    """Compiled versions of ``WindowStore``'s ``update`` and ``advance`` over ``python``,
    its methods: here, none -- those stay."""
    return None


def bind_reader(
    reader_type: type, cache_type: type, missing: object, python_get: Callable[..., Any]
) -> Callable[..., Any] | None:
    """A compiled ``Reader.get`` over ``python_get``, the Python one: here, none."""
    return None


def bind_seat(
    seat_type: type, current: object, python: Mapping[str, Callable[..., Any]]
) -> dict[str, Callable[..., Any]] | None:
    """Compiled versions of ``Processor``'s per-record lookups (``state``, ``window``,
    ``table``) over ``python``, its methods: here, none -- those stay."""
    return None


def bind_batch(batch_type: type) -> None:
    """Name the class of the batches ``fill`` appends to: its instances have the slots
    ``_add`` (the record builder's ``append(offset, timestamp, key, value, headers)``,
    None when full) and ``count`` (records appended, an int)."""
    _batch_type[:] = [batch_type]


def fill(
    outputs: list[Output],
    start: int,
    open_: dict[tuple[str, int], Any],
    lists: dict[str, list[int]],
    max_bytes: int,
) -> int:
    """Append ``outputs[start:]``, in order, to their partitions' batches in ``open_``,
    while each output needs nothing awaited nor named in an error; returns the index of
    the first that does -- or ``len(outputs)``. That one is left for the caller, which
    appends it itself: an output not exactly an ``Output``; a partition-less one whose
    key is not bytes or whose topic has no partition list in ``lists`` (``lists[topic]``
    is the topic's partitions as its producer's partitioner indexes them: the output
    goes to ``lists[topic][(murmur2(key) & 0x7FFFFFFF) % len(lists[topic])]``); one
    whose partition has no batch in ``open_``; one its batch refuses (full, or a
    ``TypeError``: nothing is appended then). An output over ``max_bytes`` once appended
    raises ``Oversize``: its batch must never be sent."""
    if not _batch_type:
        raise RuntimeError("fill before bind_batch")
    if start < 0:
        raise ValueError(f"fill from {start}")
    batch_type = _batch_type[0]
    i = start
    while i < len(outputs):
        o = outputs[i]
        if type(o) is not Output:
            return i
        topic, partition, key = o.topic, o.partition, o.key
        if partition is None:
            if type(key) is not bytes:
                return i
            listed = lists.get(topic)
            if type(listed) is not list or not listed:
                return i
            h = _hashes.get(key)
            if h is None:
                h = murmur2(key)
                if len(key) <= _HASHED_KEY_BYTES:
                    if len(_hashes) >= _HASHED:
                        _hashes.clear()
                    _hashes[key] = h
            partition = listed[(h & 0x7FFFFFFF) % len(listed)]
        batch: Any = open_.get((topic, partition))
        if batch is None or type(batch) is not batch_type:
            return i
        headers = list(o.headers) if o.headers else _NO_HEADERS
        try:
            meta = batch._add(batch.count, o.timestamp, key, o.value, headers)
        except TypeError:
            return i
        if meta is None:
            return i
        batch.count += 1
        if meta.size > max_bytes:
            raise Oversize(i, meta.size)
        i += 1
    return i


def byte_count(records: Sequence[Record]) -> int:
    """Key + value bytes of ``records`` (a missing key or value counts 0)."""
    return sum(len(r.value or b"") + len(r.key or b"") for r in records)


def _varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    raw, shift = 0, 0
    while True:
        if at >= end or shift > 63:
            raise Corrupt("a varint runs past its record")
        b = data[at]
        at += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), at
        shift += 7


def _bytes(data: bytes, at: int, end: int) -> tuple[bytes | None, int]:
    n, at = _varint(data, at, end)
    if n < 0:
        return None, at
    if n > end - at:
        raise Corrupt("a field runs past its record")
    return data[at : at + n], at + n


def decode_batch(
    raw: bytes, pos: int, topic: str, partition: int, fetch_offset: int
) -> list[Record]:
    """The records of the uncompressed v2 record batch at ``pos`` of ``raw`` (a fetch
    answer's records), as ``Record``s of ``topic``/``partition``, those below
    ``fetch_offset`` left out. Their timestamps: the batch's first timestamp plus each
    record's delta, or the batch's max timestamp for a log-append-time batch. Nothing
    here checks the batch's CRC or transaction: the caller does, per batch. A batch it
    cannot read raises ``Corrupt``."""
    if pos < 0 or pos > len(raw) - 61:
        raise Corrupt("a batch header runs past the fetch")
    base_offset, length = struct.unpack_from(">qi", raw, pos)
    end = pos + 12 + length
    if length < 49 or end > len(raw):
        raise Corrupt("a batch runs past the fetch")
    if raw[pos + 16] != 2:
        raise Corrupt("not a v2 record batch")
    (attributes,) = struct.unpack_from(">h", raw, pos + 21)
    if attributes & 0x07:
        raise Corrupt("a compressed batch (decode it through aiokafka)")
    first_ts, max_ts = struct.unpack_from(">qq", raw, pos + 27)
    (count,) = struct.unpack_from(">i", raw, pos + 57)
    at = pos + 61
    out: list[Record] = []
    for _ in range(count):
        record_length, at = _varint(raw, at, end)
        if record_length < 0 or record_length > end - at:
            raise Corrupt("a record runs past its batch")
        record_end = at + record_length
        at += 1  # the record's attributes: unused
        ts_delta, at = _varint(raw, at, record_end)
        offset_delta, at = _varint(raw, at, record_end)
        key, at = _bytes(raw, at, record_end)
        value, at = _bytes(raw, at, record_end)
        n, at = _varint(raw, at, record_end)
        if n < 0:
            raise Corrupt("a record with a negative header count")
        pairs: list[tuple[str, bytes | None]] = []
        for _ in range(n):
            hkey, at = _bytes(raw, at, record_end)
            if hkey is None:
                raise Corrupt("a header without a key")
            hvalue, at = _bytes(raw, at, record_end)
            pairs.append((hkey.decode("utf-8"), hvalue))
        if at != record_end:
            raise Corrupt("a record's fields do not fill its length")
        offset = base_offset + offset_delta
        if offset < fetch_offset:  # below the fetch offset, or not past the last one kept
            continue
        fetch_offset = offset + 1
        when = max_ts if attributes & 0x08 else first_ts + ts_delta
        headers: Any = tuple(pairs)  # a header's value may be null (None), as in aiokafka's
        out.append(Record(topic, partition, offset, key, value, headers, when))
    if at != end:
        raise Corrupt("bytes left in a batch after its records")
    return out
