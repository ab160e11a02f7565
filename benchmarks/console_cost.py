"""``python -m benchmarks console-cost``: what an open console page costs an app, each
of its parts timed alone on the CPU, summed per second of the app.

    .venv/bin/python -m benchmarks console-cost [--txns-per-s 12.5 50] [--rounds 7]

The end-to-end comparison (``python -m benchmarks metrics``: the copy with the page open
against the copy without) cannot resolve 1% on this machine, where turns differ by far
more. This one times what the console adds to the app's process, each part alone, with
``time.thread_time`` (or ``time.process_time`` for the server, whose work is on its own
threads), the median of ``--rounds``:

- ``transaction_ended``: the recorder told of one transaction (the only call per
  transaction; nothing is per record), a second summed up whenever one begins;
- ``tick``: what the operations ticker adds once a second with the console on -- the
  partitions' offsets handed to the recorder, the runtime's ``state_now`` (for the
  stateful case, ``Sizes.sample`` walking 2,000 keys of RocksDB local copies) and the
  recorder told of it;
- ``snapshot``: one ask of ``/console/snapshot.json`` through the operations server
  (HTTP parsing, the recorder's snapshot of five full minutes, 200 events, JSON, the
  socket), timed as the process's CPU while another process asks, so the asker's own
  work is not counted.

The cost of a second is ``txns_per_s`` x ``transaction_ended`` + ``tick`` + ``snapshot``
(the page asks once a second), as a share of one core: the event loop is one thread,
and a pass-through keeps it busy, so that share is what the page can take from its
throughput. (The server's work runs on its own threads, but holds the GIL while it
runs, so it is counted in full.) Results go to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eosflow._console import Console, Recorder
from eosflow._observe import AbortReason, Outcome, TransactionReport
from eosflow._ops._http import MetricsServer
from eosflow._records import PartitionOffsets, StateNow
from eosflow._state._local import EMPTY, Env, LocalPartition
from eosflow._state._sizes import Sizes

PARTITIONS = [("orders", p) for p in range(12)]
RESULTS = Path(__file__).parent / "results"


class _Clock:
    def __init__(self) -> None:
        self.now = time.time() - 400.0

    def __call__(self) -> float:
        return self.now


def _report(clock: _Clock, committed: bool = True) -> TransactionReport:
    t = time.monotonic()
    phases = (("flush", t, t + 0.004), ("offsets", t, t + 0.003))
    phases += (("heartbeat", t + 0.004, t + 0.005), ("end_txn", t + 0.005, t + 0.008))
    return TransactionReport(
        Outcome.COMMITTED if committed else Outcome.ABORTED,
        None if committed else AbortReason.PROCESSING_ERROR,
        None if committed else "the processor raised ValueError: a bad record " * 4,
        20_000,
        20_000,
        0,
        t,
        clock.now,
        t + 0.01,
        phases,
        tuple(PARTITIONS[:3]),
    )


def _full_recorder(txns_per_s: float) -> tuple[Recorder, _Clock]:
    """A recorder holding five full minutes at ``txns_per_s``, 200 events (aborts among
    them), 12 partitions held and sampled."""
    clock = _Clock()
    r = Recorder(clock)
    r.partitions_assigned(frozenset(PARTITIONS))
    step = 1.0 / txns_per_s
    for i in range(int(310 * txns_per_s)):
        clock.now += step
        r.transaction_ended(_report(clock, committed=i % 50 != 0))
    r.offsets_sampled({p: PartitionOffsets(10**6, 10**6 + 5, 10**6 + 5, 5) for p in PARTITIONS})
    return r, clock


def _median_us(fn: Callable[[], object], n: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(n):
            fn()
        times.append((time.thread_time() - start) / n * 1e6)
    return statistics.median(times)


def transaction_cost(txns_per_s: float, rounds: int) -> float:
    r, clock = _full_recorder(txns_per_s)
    step = 1.0 / txns_per_s
    reports = [_report(clock) for _ in range(64)]
    i = 0

    def one() -> None:
        nonlocal i
        clock.now += step
        r.transaction_ended(reports[i % 64])
        i += 1

    return _median_us(one, 2_000, rounds)


def tick_cost(rounds: int, state_dir: Path | None) -> float:
    """The ticker's console part once: offsets to the recorder, ``state_now``, state to
    the recorder. With ``state_dir``: three RocksDB copies of 100,000 keys walked."""
    r, _ = _full_recorder(12.5)
    offsets = {p: PartitionOffsets(10**6, 10**6 + 5, 10**6 + 5, 5) for p in PARTITIONS}
    state: Callable[[], StateNow] = lambda: StateNow([], [])  # noqa: E731 (a stateless copy)
    if state_dir is not None:
        env, sizes = Env(), Sizes()
        copies = {p: LocalPartition(state_dir, p, ["counts"], env) for p in PARTITIONS[:3]}
        for local in copies.values():
            for chunk in range(10):
                rows = {f"key-{chunk}-{k:06d}".encode(): b"42" for k in range(10_000)}
                local.apply({"counts": rows}, {"counts": EMPTY})
        ready = set(copies)
        state = lambda: StateNow([], sizes.sample(copies, ready, {}))  # noqa: E731

    def one() -> None:
        r.offsets_sampled(offsets)
        r.state_sampled(state())

    return _median_us(one, 200, rounds)


_ASKER = """
import sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
for _ in range(n):
    urllib.request.urlopen(url).read()
print("done", flush=True)
"""


def snapshot_cost(rounds: int) -> tuple[float, int]:
    """One ask of the snapshot through the server, in µs of this process's CPU, and
    the answer's size in bytes."""
    console = Console("orders-enrich", ["orders"])
    console.recorder, _ = _full_recorder(12.5)
    server = MetricsServer("127.0.0.1", 0, None, None, None, console.routes())
    server.start()
    url, n = f"http://127.0.0.1:{server.port}/console/snapshot.json", 200
    size = len(console.routes()["/console/snapshot.json"]()[2])
    times = []
    try:
        for _ in range(rounds):
            asker = subprocess.Popen(
                [sys.executable, "-c", _ASKER, url, str(n)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert asker.stdin is not None and asker.stdout is not None
            assert asker.stdout.readline().strip() == "ready"
            start = time.process_time()
            asker.stdin.write("go\n")
            asker.stdin.flush()
            assert asker.stdout.readline().strip() == "done"
            times.append((time.process_time() - start) / n * 1e6)
            asker.wait(30)
    finally:
        server.stop()
    return statistics.median(times), size


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks console-cost")
    ap.add_argument("--txns-per-s", type=float, nargs="+", default=[12.5, 50.0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    rounds = args.rounds
    print(f"timing each part, median of {rounds} rounds ...", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        tick_stateful = tick_cost(rounds, Path(tmp))
    tick_stateless = tick_cost(rounds, None)
    snapshot_us, snapshot_bytes = snapshot_cost(rounds)
    print(
        f"  tick: {tick_stateless:,.1f} µs stateless, {tick_stateful:,.1f} µs with 3 stores "
        f"of 100,000 keys; snapshot: {snapshot_us:,.1f} µs ({snapshot_bytes:,} B)"
    )
    rows: list[dict[str, Any]] = []
    for rate in args.txns_per_s:
        txn_us = transaction_cost(rate, rounds)
        for case, tick_us in (("stateless", tick_stateless), ("stateful", tick_stateful)):
            per_s = rate * txn_us + tick_us + snapshot_us
            rows.append(
                {
                    "txns_per_s": rate,
                    "case": case,
                    "transaction_ended_us": round(txn_us, 2),
                    "tick_us": round(tick_us, 1),
                    "snapshot_us": round(snapshot_us, 1),
                    "per_second_us": round(per_s, 1),
                    "share_of_a_core_pct": round(per_s / 1e4, 3),
                }
            )
            print(
                f"  {rate:g} txn/s, {case}: transaction_ended {txn_us:.2f} µs; "
                f"{per_s:,.0f} µs a second = {per_s / 1e4:.3f}% of a core",
                flush=True,
            )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"console-cost-{time.strftime('%Y-%m-%d-%H%M%S')}.json"
    out.write_text(json.dumps({"rounds": rounds, "snapshot_bytes": snapshot_bytes, "rows": rows}))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
