"""Records to Arrow and Arrow to outputs: the Spark path never goes through pandas.

Input columns (the DataFrame a ``SparkProcessor.transform`` receives):
  key binary, value binary, topic string, partition int32, offset int64,
  timestamp timestamp[ms, UTC], headers list<struct<key: string, value: binary>>

Output columns (what ``transform`` returns): ``value`` (binary or string) is required;
``key`` (binary or string), ``topic`` (string; else the processor's ``output_topic``),
``partition`` (integer) and ``headers`` (as above) are optional. Any other column is an
error: it usually means a missing ``select``.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from .._records import Output, Record

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
INPUT_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("ms", tz="UTC")),
        ("headers", HEADER_TYPE),
    ]
)
OUTPUT_COLUMNS = ("value", "key", "topic", "partition", "headers")
INPUT_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, headers array<struct<key: string, value: binary>>"
)
"""``INPUT_SCHEMA`` in Spark's words: Spark Connect cannot infer a schema from an empty
table (``CANNOT_INFER_EMPTY_SCHEMA``), so the warm-up's empty batch states it."""


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building ~10^5 acyclic objects: creating
    them triggers collections that rescan every live object, which measured 66 of the
    102 ms of turning 100,000 rows into outputs. Reference counting still frees memory;
    the collector is restored (if it was on) as soon as the conversion ends."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def records_to_arrow(records: Sequence[Record]) -> pa.Table:
    with _gc_paused():
        return _records_to_arrow(records)


def _records_to_arrow(records: Sequence[Record]) -> pa.Table:
    # headers as flat key/value arrays plus list offsets: no per-record dicts
    offsets = [0]
    header_keys: list[str] = []
    header_values: list[bytes] = []
    for r in records:
        for k, v in r.headers:
            header_keys.append(k)
            header_values.append(v)
        offsets.append(len(header_keys))
    headers = pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.StructArray.from_arrays(
            [pa.array(header_keys, pa.string()), pa.array(header_values, pa.binary())],
            names=["key", "value"],
        ),
    )
    return pa.table(
        [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array([r.topic for r in records], pa.string()),
            pa.array([r.partition for r in records], pa.int32()),
            pa.array([r.offset for r in records], pa.int64()),
            pa.array(
                [r.timestamp if r.timestamp >= 0 else None for r in records],
                pa.timestamp("ms", tz="UTC"),
            ),
            headers,
        ],
        schema=INPUT_SCHEMA,
    )


def arrow_to_outputs(table: pa.Table, default_topic: str | None) -> list[Output]:
    with _gc_paused():
        return _arrow_to_outputs(table, default_topic)


def _arrow_to_outputs(table: pa.Table, default_topic: str | None) -> list[Output]:
    names = table.column_names
    extra = [n for n in names if n not in OUTPUT_COLUMNS]
    if extra or "value" not in names:
        raise ValueError(
            f"transform() returned columns {names}; it must return 'value' and may return "
            f"{list(OUTPUT_COLUMNS[1:])} only (extra: {extra})"
        )
    n = table.num_rows
    values = _bytes_column(table, "value")
    keys = _bytes_column(table, "key") if "key" in names else [None] * n
    if "topic" in names:
        topics: list[Any] = table.column("topic").to_pylist()
    elif default_topic is not None:
        topics = [default_topic] * n
    else:
        raise ValueError(
            "transform() returned no 'topic' column and the processor has no output_topic"
        )
    parts = table.column("partition").to_pylist() if "partition" in names else [None] * n
    if None in topics:
        if default_topic is None:
            raise ValueError("transform() output has rows with a null topic")
        topics = [default_topic if t is None else t for t in topics]
    if "headers" in names:
        headers = [
            tuple((h["key"], h["value"]) for h in hs or ())
            for hs in table.column("headers").to_pylist()
        ]
    else:
        headers = [()] * n
    return list(map(Output, topics, values, keys, headers, parts))


def _bytes_column(table: pa.Table, name: str) -> list[bytes | None]:
    col = table.column(name)
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        return col.to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return col.cast(pa.binary()).to_pylist()  # type: ignore[no-any-return]  # UTF-8 bytes
    raise ValueError(f"output column {name!r} is {col.type}; cast it to binary or string")
