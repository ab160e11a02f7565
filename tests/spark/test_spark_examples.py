"""The Spark examples the docs show (examples/spark_wordcount.py, spark_enrich.py,
spark_clicks.py) give the rows they promise, on the Spark of this run's mode (local,
standalone or Connect: on a cluster their module is shipped, as a user's would be)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from spark_procs import TenSecondClicks
from stateful import race_clicks

import eosflow
from eosflow.spark import SparkProcessor
from eosflow.testing import FakeCluster, check_windows
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


# Windows kept by Spark (examples/spark_clicks.py, 10 s windows): each transaction's
# clicks counted in one job, merged into the windows, finals emitted as windows close.
# Partition 1 runs far behind partition 0; a click in its window's grace and a late one.
# The finals equal those the input alone gives, the late click counted once.
async def test_the_spark_clicks_example_gives_the_inputs_finals(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c, src, proc = eosflow_cluster, "in", TenSecondClicks()
    app, clicks = await race_clicks(
        c,
        proc,
        tmp_path,
        session_s=20.0,
        max_records_per_txn=60,
        commit_interval_s=0.5,
    )
    spec = proc.windows["clicks"]
    assert spec == eosflow.Tumbling(size_s=10, grace_s=2)
    report = await check_windows(c.bootstrap_servers, src, f"{src}-per-window", spec)
    assert report.ok, report.summary()
    assert report.expected > 0 and report.late == 1 and app.stats.late == 1
    assert app.stats.committed >= clicks // 60
