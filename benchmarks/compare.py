"""eosflow against the alternatives, side by side in one run, on the same broker.

    .venv/bin/python -m benchmarks.compare --records 200000 --reps 3 [--broker genuine]

Contenders, each in its own process and run in turns (A B C A B C ...): eosflow with a
pass-through processor; optionally eosflow with ``process_ahead`` on (``eosflow-ahead``);
a hand-written aiokafka loop (getmany, send, send_offsets, commit) at the same
transaction size; the same loop with confluent-kafka (``librdkafka``); quixstreams in
exactly-once mode; Kafka Streams ``exactly_once_v2`` as a pass-through (``kafka-streams``,
``java/PassThrough.java``, compiled against the broker's version). Reports median
records/s, the ratio to the aiokafka loop and eosflow's to each contender, peak RSS, and
end-to-end latency from a record's production to its visibility for a read_committed
reader (p50/p99) under a steady load; after every run the output is checked exactly once
(every input once, committed offsets at the end). An untimed warm-up turn of every
contender comes first (``--no-warmup`` skips it). ``--intervals`` sweeps the commit
interval, ``--partitions`` the input partitions, ``--work-rounds`` gives every contender
the same CPU work per record, and ``--broker-latency-ms`` slows the test cluster's every
request. The broker: ``--broker fake`` (the default), the test cluster in its own process,
or any broker named by ``EOSFLOW_BENCH_BOOTSTRAP``; ``--broker genuine[:version]``, one
Apache Kafka broker started from its jars (``eosflow.testing._genuine``) and stopped at the
end. Writes ``benchmarks/results/compare.json`` (and ``compare.png`` when matplotlib is
installed) and prints markdown tables.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import json
import os
import platform
import sys
import time
import uuid
from typing import Any

from benchmarks._bench_broker import broker
from benchmarks._ceiling import KafkaTools
from benchmarks._compare_report import plot, print_table
from benchmarks._harness import (
    CONTENDERS,
    JVM,
    RESULTS,
    budget_of,
    check,
    contender,
    create,
    seed,
    settle,
)
from benchmarks._jvm import WARM_RECORDS, kafka_copier, kafka_streams
from benchmarks._latency import latencies
from eosflow.testing._genuine import DEFAULT_VERSION

DEFAULT_FAKE = ["eosflow", "aiokafka", "quixstreams"]
DEFAULT_GENUINE = ["eosflow", "aiokafka", "librdkafka", "quixstreams", *JVM]
STREAMS_FALLBACK = "4.3.1"  # the newest kafka-streams Maven Central served here (no 4.4.0)
WARMUP_RECORDS = 20_000


async def throughput(
    boot: str,
    names: list[str],
    args: argparse.Namespace,
    interval: float,
    partitions: int,
    records: int,
) -> dict[str, list[dict[str, Any]]]:
    src = f"cmp-in-{uuid.uuid4().hex[:8]}"
    await create(boot, (src, partitions))
    await seed(boot, src, records, args.size, partitions)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    if args.warmup and not args.warmed:
        await warm_up(boot, names, args, interval, partitions)
        args.warmed = True
    ceiling: list[dict[str, float]] = []
    turn = [*names, *(["ceiling"] if args.tools is not None else [])]
    for rep in range(args.reps):
        # in turns, so drift on a shared machine hits everyone; each turn starts one place
        # further on, so no contender always runs first (measured here: the run right
        # after a heavy one -- Kafka's perf producer, another contender -- was slower)
        for name in turn[rep % len(turn) :] + turn[: rep % len(turn)]:
            await settle()
            if name == "ceiling":  # Kafka's own tools, in the turn like a contender
                ceiling.append(await perf_tools(boot, src, args, interval, partitions, records))
                continue
            dst, group = f"cmp-out-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
            await create(boot, (dst, partitions))
            r = await contender(name, boot, src, dst, records, interval, args, group)
            runs[name].append(r)
            verdict = await check(boot, src, dst, group, "key", r) if args.check else ""
            print(
                f"  {records:,} records, interval {interval:g} s, {partitions} partitions, "
                f"rep {rep + 1}: {name:14s}"
                f" {r['rate']:9,.0f} rec/s, peak RSS {r['rss_peak_mb']:.0f} MiB  {verdict}",
                flush=True,
            )
    if ceiling:
        runs["ceiling"] = ceiling
    return runs


async def perf_tools(
    boot: str, src: str, args: argparse.Namespace, interval: float, partitions: int, records: int
) -> dict[str, float]:
    """The broker's ceiling in this turn (``_ceiling``): Kafka's transactional perf
    producer writing as many records to a fresh topic, its perf consumer reading ``src``."""
    tools: KafkaTools = args.tools
    dst = f"cmp-perf-{uuid.uuid4().hex[:8]}"
    await create(boot, (dst, partitions))
    produce = await tools.produce(boot, dst, records, args.size, interval)
    consume = await tools.consume(boot, src, records)
    r = {"produce": produce, "consume": consume, "rate": min(produce, consume)}
    print(
        f"  interval {interval:g} s, {partitions} partitions: Kafka's perf tools: transactional "
        f"produce {produce:,.0f} rec/s, read_committed consume {consume:,.0f} rec/s",
        flush=True,
    )
    return r


async def warm_up(
    boot: str, names: list[str], args: argparse.Namespace, interval: float, partitions: int
) -> None:
    """One untimed turn of every contender over a small topic before the first timed one.
    On a fresh genuine broker the first transactional client pays for creating
    ``__transaction_state`` and ``__consumer_offsets`` and for the broker's JIT: measured
    here, the first timed run came out at half its later rate, and whoever ran first
    carried it."""
    counts = args.records if isinstance(args.records, list) else [args.records]
    n = min(*counts, WARMUP_RECORDS)
    src = f"cmp-warm-{uuid.uuid4().hex[:8]}"
    await create(boot, (src, partitions))
    await seed(boot, src, n, args.size, partitions)
    started = time.monotonic()
    for name in names:
        dst, group = f"cmp-out-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
        await create(boot, (dst, partitions))
        await contender(name, boot, src, dst, n, interval, args, group)
    print(f"  warm-up turn ({n:,} records each, untimed): {time.monotonic() - started:.0f} s")


def choose(args: argparse.Namespace, genuine: bool) -> list[str]:
    """The contenders to run: those asked for, else the default for the broker, less
    those whose client is not installed (with a word)."""
    names: list[str] = list(args.contenders or (DEFAULT_GENUINE if genuine else DEFAULT_FAKE))
    if "aiokafka" not in names:
        names.append("aiokafka")  # every ratio is to the loop
    for name, module in (("quixstreams", "quixstreams"), ("librdkafka", "confluent_kafka")):
        if name in names and importlib.util.find_spec(module) is None:
            names.remove(name)
            print(f"{module} not installed: pip install -e '.[bench]' to compare {name}")
    return names


async def prepare_jvm(boot: str, names: list[str], args: argparse.Namespace, version: str) -> None:
    """Resolve and compile the Java contenders asked for, and seed the topic each of their
    JVMs copies before its timed copy (``_jvm.WARM_RECORDS``)."""
    args.jvm_warm = ("", "", 0)
    if "kafka-streams" in names:
        explicit = args.streams_version is not None
        args.streams = kafka_streams(
            args.streams_version or version, None if explicit else STREAMS_FALLBACK
        )
        print("preparing the Kafka Streams contender (Maven, javac; cached) ...", flush=True)
        await asyncio.to_thread(args.streams.prepare)
    if "kafka-copier" in names:
        args.copier = kafka_copier(version)
        print("preparing Kafka's TransactionalMessageCopier (Maven, javac; cached) ...")
        await asyncio.to_thread(args.copier.prepare)
    if any(n in JVM for n in names):
        src, dst = f"jvm-warm-in-{uuid.uuid4().hex[:8]}", f"jvm-warm-out-{uuid.uuid4().hex[:8]}"
        await create(boot, (src, 3), (dst, 3))
        await seed(boot, src, WARM_RECORDS, args.size, 3)
        args.jvm_warm = (src, dst, WARM_RECORDS)


async def main(args: argparse.Namespace) -> int:
    names = choose(args, args.broker.startswith("genuine"))
    async with broker(args) as (boot, described, version):
        await prepare_jvm(boot, names, args, version)
        args.tools = None
        if args.broker.startswith("genuine") and args.ceiling:
            args.tools = KafkaTools(version)
            print(f"preparing Kafka's perf tools {version} (Maven; cached) ...", flush=True)
            await asyncio.to_thread(args.tools.prepare)
        result: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}",
            "broker": described,
            "contenders": names,
            "kafka_streams_version": args.streams.version if "kafka-streams" in names else None,
            "records": args.records,
            "size": args.size,
            "budgets": {n: budget_of(n, args, args.intervals[0]).__dict__ for n in names},
            "work_rounds": args.work_rounds,
            "rate": args.rate,
            "throughput": [],
            "latency": {},
        }
        for records, partitions, interval in itertools.product(
            args.records, args.partitions, args.intervals
        ):
            runs = await throughput(boot, names, args, interval, partitions, records)
            point = {"interval_s": interval, "partitions": partitions, "runs": runs}
            point["records"] = records
            if "ceiling" in runs:
                point["ceiling"] = runs.pop("ceiling")
            result["throughput"].append(point)
        if args.latency_s > 0 and args.latency_reps > 0:  # either at 0: no latency runs
            result["latency"] = await latencies(boot, names, args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "compare.json").write_text(json.dumps(result, indent=2))
    print_table(result, names)
    plot(result, names, RESULTS)
    failed = [
        *(n for p in result["throughput"] for n, rs in p["runs"].items() for r in rs
          if r.get("exactly_once") is False),
        *(n for n, lat in result["latency"].items() if lat.get("exactly_once") is False),
    ]  # fmt: skip
    if failed:
        print(f"\nEXACTLY ONCE FAILED for: {', '.join(sorted(set(failed)))}")
        return 1
    return 0


def _named_count(text: str) -> tuple[str, int]:
    name, _, count = text.partition("=")
    if name not in CONTENDERS or not count.isdigit() or int(count) <= 0:
        raise argparse.ArgumentTypeError(f"NAME=RECORDS with NAME one of {CONTENDERS}")
    return name, int(count)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--records",
        type=int,
        nargs="+",
        default=[200_000],
        help="records per throughput run; several sizes are measured one after the other",
    )
    p.add_argument("--size", type=int, default=100)
    p.add_argument(
        "--txn-records",
        type=int,
        help="records per transaction at most, for every contender (default: eosflow's "
        "max_records_per_txn default)",
    )
    p.add_argument(
        "--txn-bytes",
        type=int,
        help="key+value bytes per transaction at most, for every contender that can cap them "
        "(0: none; default: eosflow's max_bytes_per_txn default)",
    )
    p.add_argument(
        "--min-txn-s",
        type=float,
        help="for every contender that can end a transaction early: once caught up and this "
        "old, seconds (default: eosflow's min_transaction_s default)",
    )
    p.add_argument(
        "--budget-of",
        type=_named_count,
        action="append",
        metavar="NAME=RECORDS",
        help="give one contender another record cap (every other contender keeps the "
        "common budget; the table's heading names the exception)",
    )
    p.add_argument(
        "--streams-set",
        action="append",
        metavar="KEY=VALUE",
        help="a further Kafka Streams setting (for trying settings; the defaults are in "
        "java/PassThrough.java)",
    )
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--intervals", type=float, nargs="+", default=[0.1])
    p.add_argument("--partitions", type=int, nargs="+", default=[3])
    p.add_argument("--rate", type=float, default=2000.0, help="records/s in the latency run")
    p.add_argument("--latency-s", type=float, default=10.0, help="0 skips the latency runs")
    p.add_argument(
        "--latency-reps", type=int, default=3, help="latency runs per contender, in turns"
    )
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
        help="test cluster: delay every request; genuine Kafka: add this much round trip to "
        "every connection (a proxy): a stand-in for a broker on another host",
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="genuine Kafka: the broker on one core, every contender on the other",
    )
    p.add_argument(
        "--contenders",
        nargs="+",
        choices=CONTENDERS,
        help=f"default: {' '.join(DEFAULT_FAKE)} on the test cluster, "
        f"{' '.join(DEFAULT_GENUINE)} on genuine Kafka; eosflow-ahead is eosflow with "
        "process_ahead on (shows what overlapping the commit buys)",
    )
    p.add_argument(
        "--broker",
        default="fake",
        help="fake: the test cluster in its own process (or EOSFLOW_BENCH_BOOTSTRAP's "
        f"broker); genuine[:version]: one Apache Kafka broker (default {DEFAULT_VERSION}) "
        "from its jars, resolved once into ~/.cache/eosflow/kafka, stopped at the end",
    )
    p.add_argument(
        "--streams-version",
        help="Kafka Streams version of the kafka-streams contender (default: the broker's; "
        f"if Maven cannot resolve it, {STREAMS_FALLBACK})",
    )
    p.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip the exactly-once check after every run (reading both topics back)",
    )
    p.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help=f"skip the untimed first turn of every contender ({WARMUP_RECORDS:,} records)",
    )
    p.add_argument(
        "--no-ceiling",
        dest="ceiling",
        action="store_false",
        help="genuine Kafka: skip Kafka's own perf tools (the broker's ceiling) in each turn",
    )
    p.set_defaults(warmed=False)
    try:
        sys.exit(asyncio.run(main(p.parse_args())))
    except KeyboardInterrupt:  # the broker and the running contender were stopped already
        sys.exit("interrupted")
