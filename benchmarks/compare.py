"""eosflow against the alternatives, side by side in one run, on the same broker.

    .venv/bin/python -m benchmarks.compare --records 200000 --reps 3

Contenders, each in its own process and run in turns (A B C A B C ...): eosflow with a
pass-through processor; optionally eosflow with ``process_ahead`` off (``eosflow-serial``);
a hand-written aiokafka loop (getmany, send, send_offsets, commit) at the same
transaction size; quixstreams in exactly-once mode (when installed). Reports
median records/s, the ratio to the aiokafka loop, peak RSS, and end-to-end latency from a
record's production to its visibility for a read_committed reader (p50/p99) under a
steady load. ``--intervals`` sweeps the commit interval, ``--partitions`` the input
partitions, ``--work-rounds`` gives every contender the same CPU work per record, and
``--broker-latency-ms`` slows the test cluster's every request. The broker is the test
cluster in its own process unless ``EOSFLOW_BENCH_BOOTSTRAP`` names one. Writes
``benchmarks/results/compare.json`` (and ``compare.png`` when matplotlib is installed) and
prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import statistics
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from benchmarks.cluster_throughput import start_cluster

RESULTS = Path(__file__).parent / "results"


async def create(boot: str, *topics: tuple[str, int]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=boot)
    await admin.start()
    await admin.create_topics([NewTopic(t, p, 1) for t, p in topics])
    await admin.close()


async def seed(boot: str, topic: str, n: int, size: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    payload = b"x" * size
    futs = [
        await producer.send(topic, payload, key=str(i).encode(), partition=i % partitions)
        for i in range(n)
    ]
    await asyncio.gather(*futs)
    await producer.stop()


async def contender(
    name: str,
    boot: str,
    src: str,
    dst: str,
    n: int,
    interval: float,
    txn: int,
    work_rounds: int,
) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks._contenders",
        name,
        boot,
        src,
        dst,
        str(n),
        str(interval),
        str(txn),
        str(work_rounds),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 900)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed ({proc.returncode}): {err.decode()[-2000:]}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    result["rate"] = n / result["seconds"]
    return result


async def throughput(
    boot: str, names: list[str], args: argparse.Namespace, interval: float, partitions: int
) -> dict[str, list[dict[str, Any]]]:
    src = f"cmp-in-{uuid.uuid4().hex[:8]}"
    await create(boot, (src, partitions))
    await seed(boot, src, args.records, args.size, partitions)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for rep in range(args.reps):
        for name in names:  # in turns, so drift on a shared machine hits everyone
            dst = f"cmp-out-{uuid.uuid4().hex[:8]}"
            await create(boot, (dst, partitions))
            r = await contender(
                name, boot, src, dst, args.records, interval, args.txn_records, args.work_rounds
            )
            runs[name].append(r)
            print(
                f"  interval {interval:g} s, {partitions} partitions, rep {rep + 1}: {name:14s}"
                f" {r['rate']:9,.0f} rec/s, peak RSS {r['rss_peak_mb']:.0f} MiB",
                flush=True,
            )
    return runs


async def latency(boot: str, name: str, args: argparse.Namespace) -> dict[str, float]:
    """p50/p99 from produce to read_committed visibility at ``--rate`` records/s."""
    src, dst = f"lat-in-{uuid.uuid4().hex[:8]}", f"lat-out-{uuid.uuid4().hex[:8]}"
    await create(boot, (src, 3), (dst, 3))
    n = int(args.rate * args.latency_s)
    runner = asyncio.create_task(
        contender(name, boot, src, dst, n, 0.1, args.txn_records, args.work_rounds)
    )
    reader = AIOKafkaConsumer(
        dst,
        bootstrap_servers=boot,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await reader.start()
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=0)
    await producer.start()
    lat: list[float] = []

    async def read() -> None:
        while len(lat) < n:
            batch = await reader.getmany(timeout_ms=100)
            now = time.time_ns()
            for records in batch.values():
                lat.extend(
                    (now - struct.unpack_from(">q", r.value or b"")[0]) / 1e6 for r in records
                )

    reading = asyncio.create_task(read())
    await asyncio.sleep(3)  # let the contender start and join before the clock runs
    started = time.monotonic()
    pad = b"x" * max(args.size - 8, 0)
    for i in range(n):
        due = started + i / args.rate
        if (wait := due - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        await producer.send(src, struct.pack(">q", time.time_ns()) + pad, partition=i % 3)
    await producer.flush()
    await asyncio.wait_for(reading, 120)
    await runner
    await producer.stop()
    await reader.stop()
    lat.sort()
    return {"p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(len(lat) * 0.99)], "n": n}


async def main(args: argparse.Namespace) -> None:
    names: list[str] = args.contenders or ["eosflow", "aiokafka", "quixstreams"]
    if "aiokafka" not in names:
        names.append("aiokafka")  # every ratio is to the loop
    if "quixstreams" in names and importlib.util.find_spec("quixstreams") is None:
        names.remove("quixstreams")
        print("quixstreams not installed: pip install 'eosflow[bench]' to compare it")
    if args.broker_latency_ms and os.environ.get("EOSFLOW_BENCH_BOOTSTRAP"):
        raise SystemExit("--broker-latency-ms applies to the test cluster only")
    proc, boot = await start_cluster(args.broker_latency_ms)
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "broker": os.environ.get("EOSFLOW_BENCH_BOOTSTRAP")
        or "eosflow test cluster (own process)"
        + (f", +{args.broker_latency_ms:g} ms per request" if args.broker_latency_ms else ""),
        "records": args.records,
        "size": args.size,
        "txn_records": args.txn_records,
        "work_rounds": args.work_rounds,
        "throughput": [],
        "latency": {},
    }
    try:
        for partitions in args.partitions:
            for interval in args.intervals:
                runs = await throughput(boot, names, args, interval, partitions)
                result["throughput"].append(
                    {"interval_s": interval, "partitions": partitions, "runs": runs}
                )
        for name in names if args.latency_s > 0 else []:
            result["latency"][name] = await latency(boot, name, args)
            lat = result["latency"][name]
            print(
                f"  latency {name:14s} p50 {lat['p50_ms']:.0f} ms, p99 {lat['p99_ms']:.0f} ms "
                f"at {args.rate:g} rec/s",
                flush=True,
            )
    finally:
        if proc is not None:
            proc.terminate()
            await proc.wait()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "compare.json").write_text(json.dumps(result, indent=2))
    print_table(result, names)
    plot(result, names)


def print_table(result: dict[str, Any], names: list[str]) -> None:
    print(
        f"\n{result['date']}, {result['machine']}, broker: {result['broker']}, "
        f"{result['records']:,} x {result['size']} B, {result['txn_records']}-record "
        "transactions at most, "
        + (
            f"{result['work_rounds']} SHA-256 rounds of work per record\n"
            if result.get("work_rounds")
            else "pass-through\n"
        )
    )
    print("| commit interval | partitions | contender | median rec/s | vs aiokafka | peak RSS |")
    print("|---|---|---|---|---|---|")
    for point in result["throughput"]:
        med = {n: statistics.median(r["rate"] for r in point["runs"][n]) for n in names}
        for n in names:
            rss = max(r["rss_peak_mb"] for r in point["runs"][n])
            print(
                f"| {point['interval_s']:g} s | {point['partitions']} | {n} | {med[n]:,.0f} | "
                f"{med[n] / med['aiokafka']:.2f}x | {rss:.0f} MiB |"
            )
    print("\n| contender | latency p50 | latency p99 |")
    print("|---|---|---|")
    for n, lat in result["latency"].items():
        print(f"| {n} | {lat['p50_ms']:.0f} ms | {lat['p99_ms']:.0f} ms |")


def plot(result: dict[str, Any], names: list[str]) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        print("(no plot: matplotlib is not installed)")
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for partitions in sorted({p["partitions"] for p in result["throughput"]}):
        points = [p for p in result["throughput"] if p["partitions"] == partitions]
        for n in names:
            xs = [p["interval_s"] for p in points]
            ys = [statistics.median(r["rate"] for r in p["runs"][n]) for p in points]
            ax.plot(xs, ys, marker="o", label=f"{n} ({partitions} partitions)")
    ax.set_xscale("log")
    ax.set_xlabel("commit interval (s)")
    ax.set_ylabel("records/s (median)")
    ax.set_title(
        f"Exactly-once copy, {result['records']:,} x {result['size']} B ({result['date']})"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "compare.png", dpi=120)
    print(f"plot: {RESULTS / 'compare.png'}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--txn-records", type=int, default=1000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--intervals", type=float, nargs="+", default=[0.1])
    p.add_argument("--partitions", type=int, nargs="+", default=[3])
    p.add_argument("--rate", type=float, default=2000.0, help="records/s in the latency run")
    p.add_argument("--latency-s", type=float, default=10.0, help="0 skips the latency runs")
    p.add_argument(
        "--work-rounds",
        type=int,
        default=0,
        help="CPU work per record for every contender: chained SHA-256 rounds "
        "(0: pass-through; 30 is ~25 us here)",
    )
    p.add_argument(
        "--broker-latency-ms",
        type=float,
        default=0.0,
        help="test cluster only: delay every request (a stand-in for network round trips)",
    )
    p.add_argument(
        "--contenders",
        nargs="+",
        choices=["eosflow", "eosflow-serial", "aiokafka", "quixstreams"],
        help="default: eosflow aiokafka quixstreams; eosflow-serial is eosflow with "
        "process_ahead off (shows what overlapping the commit buys)",
    )
    asyncio.run(main(p.parse_args()))
