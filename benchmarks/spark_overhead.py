"""Where Spark starts to pay off: the Spark path against plain Python, per batch size.

For each batch size (default 1,000 / 10,000 / 100,000 JSON orders) and several
repetitions, in turns, it measures:

- ``bare``: the Spark job alone -- ``createDataFrame(arrow)``, the transform, ``toArrow()``
  -- the least any Spark integration pays;
- ``eosflow``: ``SparkProcessor.process_batch``: records to Arrow, the same job off the
  event loop, Arrow to outputs (what the runtime adds on top of ``bare``);
- ``python``: the same enrichment per record in plain Python (``Processor.process``);

and reports medians, records/s, and the runtime's overhead over the bare job (target:
at most 20% at 100,000 records). Writes ``benchmarks/results/spark_overhead.json``.

    .venv/bin/python -m benchmarks.spark_overhead --sizes 1000 10000 100000 --reps 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path

import eosflow
from eosflow._demo import Enrich
from eosflow._demo._spark import SparkEnrich
from eosflow.spark._arrow import records_to_arrow

RESULTS = Path(__file__).parent / "results"


def orders(n: int) -> list[eosflow.Record]:
    return [
        eosflow.Record(
            "orders",
            i % 6,
            i,
            f"order-{i}".encode(),
            json.dumps({"id": i, "customer": f"c{i % 97}", "amount": (i * 37) % 1000}).encode(),
            (),
            1_700_000_000_000,
        )
        for i in range(n)
    ]


async def measure(sizes: list[int], reps: int) -> list[dict[str, float]]:
    spark_proc = SparkEnrich()
    py_proc = Enrich()
    started = time.monotonic()
    await spark_proc.on_start()
    print(f"Spark session started and warmed up in {time.monotonic() - started:.1f} s", flush=True)
    rows = []
    try:
        for n in sizes:
            batch = orders(n)
            bare, full, python = [], [], []
            for _ in range(reps):  # in turns, so drift on a shared machine hits all three
                t = time.perf_counter()
                table = records_to_arrow(batch)
                arrow_s = time.perf_counter() - t
                t = time.perf_counter()
                out = spark_proc.transform(spark_proc.spark.createDataFrame(table)).toArrow()
                bare.append(time.perf_counter() - t)
                assert out.num_rows == n
                t = time.perf_counter()
                outputs = await spark_proc.process_batch(batch)
                full.append(time.perf_counter() - t)
                assert len(outputs) == n
                t = time.perf_counter()
                outputs = await py_proc.process_batch(batch)
                python.append(time.perf_counter() - t)
                assert len(outputs) == n
            row = {
                "records": n,
                "bare_s": statistics.median(bare),
                "eosflow_s": statistics.median(full),
                "python_s": statistics.median(python),
                "arrow_build_s": arrow_s,
            }
            row["overhead_pct"] = 100 * (row["eosflow_s"] - row["bare_s"]) / row["bare_s"]
            rows.append(row)
            print(
                f"{n:>7} records: bare Spark job {row['bare_s']:.3f} s, eosflow Spark path "
                f"{row['eosflow_s']:.3f} s ({n / row['eosflow_s']:,.0f} rec/s, "
                f"{row['overhead_pct']:+.0f}% over bare), plain Python {row['python_s']:.3f} s "
                f"({n / row['python_s']:,.0f} rec/s)",
                flush=True,
            )
    finally:
        await spark_proc.on_stop()
    return rows


async def end_to_end(sizes: list[int], batches: int) -> list[dict[str, float]]:
    """Records/s through Kafka: seed ``batches`` x size orders into the test cluster (own
    process), run EosApp with one transaction per batch, Spark vs plain Python."""
    from aiokafka import AIOKafkaProducer

    from benchmarks.cluster_throughput import start_cluster

    proc, bootstrap = await start_cluster()
    rows = []
    try:
        for n in sizes:
            row: dict[str, float] = {"records": n}
            for name, processor in (("spark", SparkEnrich()), ("python", Enrich())):
                tag = f"{name}-{n}-{time.monotonic_ns()}"
                src = f"e2e-in-{tag}"
                total = n * batches
                producer = AIOKafkaProducer(
                    bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=256 * 1024
                )
                await producer.start()
                futs = [
                    await producer.send(src, r.value, key=r.key, partition=0) for r in orders(total)
                ]
                await asyncio.gather(*futs)
                await producer.stop()
                config = eosflow.EosConfig(
                    bootstrap_servers=bootstrap,
                    group_id=f"g-{tag}",
                    input_topics=(src,),
                    transactional_id=f"t-{tag}",
                    commit_interval_s=5.0,
                    max_records_per_txn=n,
                    session_timeout_s=60.0,
                    transaction_timeout_s=50.0,
                )
                app = eosflow.EosApp(processor, config)
                async with app:
                    while not app.assigned:  # Spark warm-up and joining are not timed
                        if app.failure is not None:
                            raise app.failure
                        await asyncio.sleep(0.01)
                    started = time.monotonic()
                    while app.stats.committed < batches:
                        if app.failure is not None:
                            raise app.failure
                        await asyncio.sleep(0.01)
                    elapsed = time.monotonic() - started
                row[f"{name}_rec_s"] = total / elapsed
            rows.append(row)
            print(
                f"{n:>7}-record transactions, end to end: Spark {row['spark_rec_s']:,.0f} "
                f"rec/s, plain Python {row['python_rec_s']:,.0f} rec/s",
                flush=True,
            )
    finally:
        if proc is not None:
            proc.terminate()
            await proc.wait()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument(
        "--e2e-batches",
        type=int,
        default=0,
        help="also run end to end through the test cluster, this many "
        "transactions per size (0: skip)",
    )
    args = p.parse_args()
    rows = asyncio.run(measure(args.sizes, args.reps))
    e2e = asyncio.run(end_to_end(args.sizes, args.e2e_batches)) if args.e2e_batches else []
    RESULTS.mkdir(exist_ok=True)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, Spark local[*]",
        "reps": args.reps,
        "end_to_end": e2e,
        "rows": rows,
    }
    (RESULTS / "spark_overhead.json").write_text(json.dumps(result, indent=2))
    print("| records | bare Spark job | eosflow Spark path | overhead | plain Python |")
    print("|---|---|---|---|---|")
    for r in rows:
        n = r["records"]
        print(
            f"| {n:,.0f} | {r['bare_s']:.3f} s | {r['eosflow_s']:.3f} s "
            f"({n / r['eosflow_s']:,.0f} rec/s) | {r['overhead_pct']:+.0f}% | "
            f"{r['python_s']:.3f} s ({n / r['python_s']:,.0f} rec/s) |"
        )


if __name__ == "__main__":
    main()
