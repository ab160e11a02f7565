"""The Spark examples the docs show (examples/spark_wordcount.py, spark_enrich.py) give
the rows they promise, on the Spark of this run's mode (local, standalone or Connect:
on a cluster their module is shipped, as a user's would be)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import eosflow
from eosflow.spark import SparkProcessor
from examples.spark_enrich import EnrichOrders
from examples.spark_wordcount import WordCount


def _records(values: Sequence[bytes], keys: Sequence[bytes | None]) -> list[eosflow.Record]:
    return [
        eosflow.Record("in", 0, i, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))
    ]


async def _run(proc: SparkProcessor, records: list[eosflow.Record]) -> list[eosflow.Output]:
    await proc.on_start()
    try:
        return await proc.process_batch(records)
    finally:
        await proc.on_stop()


def _text(b: bytes | str | None) -> str:
    return b.decode() if isinstance(b, bytes) else str(b)


async def test_the_word_count_example_counts_each_word() -> None:
    lines = [b"The cat", b"the dog, THE end", b"", b"cat"]
    outputs = await _run(WordCount(), _records(lines, [None] * len(lines)))
    counts = {_text(o.key): int(_text(o.value)) for o in outputs}
    assert counts == {"the": 3, "cat": 2, "dog": 1, "end": 1}
    assert {o.topic for o in outputs} == {"word-counts"}


async def test_the_enrichment_example_joins_and_marks_unknown_customers() -> None:
    orders = [
        {"id": 1, "customer": "c1", "amount": 12.5},
        {"id": 2, "customer": "c3", "amount": 3.0},
        {"id": 3, "customer": "c9", "amount": 7.0},  # not in the reference table
    ]
    values = [json.dumps(o).encode() for o in orders]
    keys = [f"o{o['id']}".encode() for o in orders]
    outputs = await _run(EnrichOrders(), _records(values, keys))
    got = {_text(o.key): json.loads(_text(o.value)) for o in outputs}
    assert got["o1"] == {"id": 1, "customer": "c1", "amount": 12.5, "name": "Ada", "tier": "gold"}
    assert got["o2"]["tier"] == "bronze" and got["o2"]["name"] == "Linus"
    assert got["o3"]["tier"] == "unknown" and "name" not in got["o3"]
    assert {o.topic for o in outputs} == {"orders-enriched"}
