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

from collections.abc import Sequence
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


def records_to_arrow(records: Sequence[Record]) -> pa.Table:
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
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records], HEADER_TYPE
            ),
        ],
        schema=INPUT_SCHEMA,
    )


def arrow_to_outputs(table: pa.Table, default_topic: str | None) -> list[Output]:
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
    heads = table.column("headers").to_pylist() if "headers" in names else [None] * n
    out = []
    for i in range(n):
        topic = topics[i]
        if topic is None:
            if default_topic is None:
                raise ValueError(f"row {i} of transform() output has a null topic")
            topic = default_topic
        headers = tuple((h["key"], h["value"]) for h in heads[i] or ())
        out.append(Output(topic, values[i], key=keys[i], headers=headers, partition=parts[i]))
    return out


def _bytes_column(table: pa.Table, name: str) -> list[bytes | None]:
    col = table.column(name)
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        return col.to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return [None if v is None else v.encode() for v in col.to_pylist()]
    raise ValueError(f"output column {name!r} is {col.type}; cast it to binary or string")
