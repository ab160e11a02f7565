"""The hot paths in Python: what ``_hot`` compiles, step for step.

The face falls back to these where the extension is not built (a source tree used
without installing it, a machine without a C compiler); the differential tests
(``tests/unit/test_native.py``) hold the compiled functions to them over random inputs.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from .._records import Output, Record

_M, _MASK = 0x5BD1E995, 0xFFFFFFFF
_NO_HEADERS: list[tuple[str, bytes]] = []  # shared, never mutated
_batch_type: list[type[Any]] = []  # the adapter's batch class (``bind_batch``)


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
