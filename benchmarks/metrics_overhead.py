"""``python -m benchmarks metrics``: what operating an app costs, measured.

    .venv/bin/python -m benchmarks metrics --broker genuine --records 500000 --reps 7

The pass-through copy in turns, in one run: ``eosflow-copy-bare`` (no metrics port, no
progress line, no tracing) against ``eosflow-copy-ops`` (the metrics port scraped every
second, the progress line, tracing through OpenTelemetry's API), each in its own process
on the same input, each run checked exactly once. Reports the median rate of each, their
ratio and each turn's ratio (target: under 3% cost). The options are those of ``python
-m benchmarks state`` (the harness it reuses), with these contenders.
"""

from __future__ import annotations

import asyncio
import sys

from benchmarks.state_bench import OPS, main, parse

if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse([*sys.argv[1:], "--contenders", *OPS]))))
