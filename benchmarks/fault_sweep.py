"""``python -m benchmarks fault-sweep``: the full fault matrix, one line per case.

Every request the runtime sends, under the classic group protocol with transactions v1
and (``.modern`` rows) the consumer protocol with transactions v2, x every fault the test
cluster can give it x both modes (survive: ``EosApp`` in this process; kill: ``eosflow
run`` SIGKILLed at the fault's first hit and restarted) x three arms (``due``: when the
request is due; ``@start``: before the first instance starts; ``@recover``: after the
first commit, with a forced rebalance and a failed Produce, so a recovery's own requests
meet it). Each line is the case id, its observed outcome and how often its fault hit:
``committed-all``, ``recovered``, ``fatal: <message>`` (the acceptable ones), or
``HANG``, ``LIVELOCK``, ``LEAK: <exception>``, ``DUPLICATES n``, ``LOST n``, ``NOT-HIT``.
A summary of the non-OK cases follows. The CI cover of the same matrix is
``tests/runtime/test_fault_matrix.py``.

    python -m benchmarks fault-sweep                      # everything (hours)
    python -m benchmarks fault-sweep --arm start recover --mode survive
    python -m benchmarks fault-sweep --mode survive --only Produce EndTxn
    python -m benchmarks fault-sweep --ci --json out.json  # the CI cover
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections import Counter

from testbed._matrix import (
    ARMS,
    MODES,
    Case,
    Result,
    all_cases,
    ci_cases,
    skipped,
)
from testbed._matrix_run import run_case


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks fault-sweep", description=__doc__)
    p.add_argument("--mode", choices=MODES, action="append", help="repeatable; default both")
    p.add_argument("--arm", choices=ARMS, nargs="+", default=list(ARMS), help="default all")
    p.add_argument(
        "--only", nargs="+", default=[], help="keep cases whose id contains any of these"
    )
    p.add_argument("--ci", action="store_true", help="only the CI cover")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # the outcome lines are the output

    modes = tuple(args.mode or MODES)
    cases = [
        c
        for c in (ci_cases() if args.ci else all_cases(modes, args.arm))
        if c.mode in modes
        and c.arm in args.arm
        and (not args.only or any(s in c.id for s in args.only))
    ]
    print(f"# {len(cases)} cases; left out (Kafka never answers them):", flush=True)
    for request, fault in skipped():
        print(f"#   {request}: {fault}")
    started = time.monotonic()
    results: list[tuple[Case, Result]] = []
    for case in cases:
        result = asyncio.run(run_case(case))
        results.append((case, result))
        print(result.line(), flush=True)
    took = time.monotonic() - started

    kinds = Counter(r.kind for _, r in results)
    print(
        f"\n# {len(results)} cases in {took / 60:.1f} min: "
        + ", ".join(f"{k} {n}" for k, n in kinds.most_common())
    )
    bad = [r for _, r in results if not r.ok]
    if bad:
        print(f"# not OK ({len(bad)}):")
        for r in bad:
            print(f"#   {r.case_id}: {r.outcome}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "seconds": round(took, 1),
                    "cases": [
                        {
                            "id": r.case_id,
                            "request": c.request.name,
                            "fault": c.fault.name,
                            "mode": c.mode,
                            "arm": c.arm,
                            "kind": r.kind,
                            "outcome": r.outcome,
                            "seconds": round(r.seconds, 1),
                            "hits": r.hits,
                        }
                        for c, r in results
                    ],
                },
                fh,
                indent=1,
            )
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
