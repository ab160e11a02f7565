"""``python -m benchmarks txn-end``: when should a transaction that has caught up end?

    .venv/bin/python -m benchmarks txn-end --broker genuine --settings 0 0.005 0.02 0.05 0.1

For each ``min_transaction_s`` setting (the budget's ``min_txn_s``, ``_budget``),
eosflow's pass-through with otherwise default settings (100 ms commit interval): the
visibility latency at a steady ``--rate`` (p50, p99, read_committed, as ``python -m
benchmarks run`` measures it) and the commits per second it took, then the throughput
over ``--records`` in ``--reps`` turns (the settings in turns). Every run is checked
exactly once. 0.1 s (the commit interval) is the old rule: a transaction stayed open for
the interval whatever its input. Writes ``benchmarks/results/txn-end.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from typing import Any

from benchmarks._bench_broker import broker
from benchmarks._harness import RESULTS
from benchmarks._latency import latency
from benchmarks.compare import throughput


async def main(args: argparse.Namespace) -> int:
    out: dict[str, Any] = {"args": vars(args), "latency": {}, "throughput": {}}
    ok, reps = True, args.reps
    async with broker(args) as (boot, described, _version):
        out["broker"] = described
        print(f"broker: {described}", flush=True)
        for setting in args.settings:
            args.min_txn_s = setting
            lat = await latency(boot, "eosflow", args)
            out["latency"][str(setting)] = lat
            ok &= lat.get("exactly_once", True)
            print(
                f"  min_transaction_s {setting:g}: p50 {lat['p50_ms']:.0f} ms, p99 "
                f"{lat['p99_ms']:.0f} ms, {lat.get('commits_per_s', 0):.0f} commits/s at "
                f"{args.rate:g} rec/s, {lat.get('check', '').splitlines()[0]}",
                flush=True,
            )
        if args.records:
            rates: dict[str, list[float]] = {str(s): [] for s in args.settings}
            args.reps = 1
            for _ in range(reps):
                for setting in args.settings:
                    args.min_txn_s = setting
                    runs = await throughput(boot, ["eosflow"], args, 0.1, 3, args.records)
                    r = runs["eosflow"][0]
                    ok &= r.get("exactly_once", True)
                    rates[str(setting)].append(r["rate"])
            out["throughput"] = rates
    print(
        f"\n{described}; latency at {args.rate:g} rec/s for {args.latency_s:g} s; "
        f"throughput over {args.records:,} records, medians of {reps} turns\n"
    )
    print("| min_transaction_s | p50 ms | p99 ms | commits/s | throughput rec/s (min-max) |")
    print("|---:|---:|---:|---:|---:|")
    for setting in args.settings:
        lat = out["latency"][str(setting)]
        rs = out["throughput"].get(str(setting)) or [0.0]
        print(
            f"| {setting:g} | {lat['p50_ms']:.0f} | {lat['p99_ms']:.0f} | "
            f"{lat.get('commits_per_s', 0):.0f} | {statistics.median(rs):,.0f} "
            f"({min(rs):,.0f}-{max(rs):,.0f}) |"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "txn-end.json").write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", default="fake", help="fake, or genuine[:version]")
    ap.add_argument("--settings", type=float, nargs="+", default=[0, 0.005, 0.02, 0.05, 0.1])
    ap.add_argument("--rate", type=float, default=2000.0)
    ap.add_argument("--latency-s", type=float, default=10.0)
    ap.add_argument("--records", type=int, default=200_000, help="0: latency only")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    # what compare.latency / throughput read
    args.size, args.txn_records, args.work_rounds, args.check = 100, None, 0, True
    args.txn_bytes = args.min_txn_s = args.budget_of = None
    args.broker_latency_ms, args.warmup, args.warmed = 0.0, True, False
    args.pin, args.tools = False, None
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
