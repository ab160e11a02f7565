"""``python -m benchmarks join``: a stream-table join, measured.

    .venv/bin/python -m benchmarks join --broker genuine --orders 1000000 \
        --customers 100000 --reps 3 --restore-rows 1000000

1. **Throughput**, contenders in turns (A B C A B C ...), each in its own process, on the
   same input, each into a fresh output topic and group:
   - the input: ``--customers`` rows (100 B, keys ``c000000``...) then ``--orders``
     orders (100 B, keyed by a customer drawn at random), both topics with
     ``--partitions`` partitions keyed alike (co-partitioned); after every
     ``--update-every``-th order a customer's row is updated, so the table changes while
     the orders flow. Event times: the rows first, a millisecond apart, then orders at
     even and updates at odd milliseconds (never a tie). All of it is in the topics
     before a contender starts;
   - ``eosflow-copy``: eosflow's pass-through of the orders alone (the reference);
     ``eosflow-join``: each order with its customer's row as of its time (an
     ``eosflow.Table``), defaults; ``kafka-streams-join``: Kafka Streams' KStream-KTable
     join (``java/JoinRun.java``: exactly_once_v2, PassThrough's settings, the commit
     interval, ``topology.optimization=all``), warm: its JVM first joins
     ``WARM_RECORDS`` orders of topics seeded alike with an instance of its own;
   - by name only (``--contenders``), the references that tell the join's costs apart:
     ``eosflow-copy-wide``, eosflow's pass-through writing each order as ``order|order``
     (as many bytes as the join writes, no table: what the bytes alone cost), and
     ``kafka-streams-copy``, ``JoinRun`` without its table (the orders passed through,
     warm alike: Kafka Streams' own reference for its join);
   - the rate: orders per second, from the first order processed to the group's
     offsets committed at the end of the orders (both joins also read the rows first);
   - every run is checked: each order exactly once in the committed output, joined with
     the row the input alone gives it (the latest of its customer before its time).
2. **Restore** (``--restore-rows`` N > 0): ``eosflow-join`` over N rows of N customers (and
   ``--orders``/10 orders), then a fresh instance of the group (empty local copy)
   restores every table partition from the topic: the time from its start to every
   table partition ready.

   ``quixstreams-join``: quixstreams' ``join_asof`` (an order with the latest row of its
   customer stamped at or before it), exactly-once, the same commit interval; it takes
   records as fetched, not in timestamp order across the topics, and its check says how
   many orders it joined with another row than the input gives (not counted a failure
   of the run: the rate stands, the check is reported beside it).

Targets (reported, never failed on): join >= 0.6x copy; eosflow-join >= 1.0x
kafka-streams-join; the restore of 1,000,000 rows under 5 s. The broker: as ``python -m
benchmarks run`` (``--broker fake`` or ``genuine[:version]``). Writes
``benchmarks/results/join.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from aiokafka import AIOKafkaProducer

from benchmarks._bench_broker import broker
from benchmarks._harness import RESULTS, create, run_contender
from benchmarks._jvm import WARM_RECORDS, JavaContender, join_args, kafka_streams_join
from benchmarks.compare import STREAMS_FALLBACK
from eosflow._checks._checker import read_records

STREAMS = "kafka-streams-join"
STREAMS_COPY = "kafka-streams-copy"
QUIX = "quixstreams-join"
WIDE = "eosflow-copy-wide"
CONTENDERS = ["eosflow-copy", "eosflow-join", STREAMS, QUIX]
COPIES = ("eosflow-copy", WIDE, STREAMS_COPY)  # the orders alone, no table
MORE = [WIDE, STREAMS_COPY]  # given by name only
COPY_MARK = "-"  # JoinRun's CUSTOMERS for its pass-through (JoinRun.COPY)
TIMEOUT_S = 1800.0
SIZE = 100  # bytes of an order's and a row's value


def history(
    orders: int, customers: int, update_every: int, seed: int = 7
) -> tuple[list[tuple[bytes, int, bytes]], list[tuple[bytes, int, bytes]]]:
    """(rows, orders), each (key, timestamp ms, value), in time order (see the module)."""
    rng = random.Random(seed)
    start = int(time.time() // 60 * 60_000) - (customers + 2 * orders + 2)
    version = [0] * customers
    rows = [(b"c%06d" % i, start + i, _pad(b"r%06d-v0" % i)) for i in range(customers)]
    out: list[tuple[bytes, int, bytes]] = []
    t = start + customers + 1
    for j in range(orders):
        out.append((b"c%06d" % rng.randrange(customers), t + 2 * j, _pad(b"o%09d" % j)))
        if j % update_every == update_every - 1:
            i = rng.randrange(customers)
            version[i] += 1
            rows.append((b"c%06d" % i, t + 2 * j + 1, _pad(b"r%06d-v%d" % (i, version[i]))))
    return rows, out


def _pad(value: bytes) -> bytes:
    return value + b"." * (SIZE - len(value))


def expected(rows: list[Any], orders: list[Any]) -> dict[bytes, bytes]:
    """Each order's output value: the order, '|', its customer's latest row before it."""
    latest: dict[bytes, bytes] = {}
    out: dict[bytes, bytes] = {}
    events = sorted([(t, 0, k, v) for k, t, v in rows] + [(t, 1, k, v) for k, t, v in orders])
    for _t, kind, key, value in events:
        if kind == 0:
            latest[key] = value
        elif key in latest:
            out[value[:10]] = value + b"|" + latest[key]
    return out


async def seed(boot: str, topic: str, events: list[tuple[bytes, int, bytes]]) -> None:
    print(f"  seeding {len(events):,} records into {topic} ...", flush=True)
    started = time.monotonic()
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    try:
        for lo in range(0, len(events), 100_000):  # acknowledged a slice at a time
            futs = [
                await producer.send(topic, v, key=k, timestamp_ms=t)
                for k, t, v in events[lo : lo + 100_000]
            ]
            await asyncio.gather(*futs)
    finally:
        await producer.stop()
    print(f"  seeded in {time.monotonic() - started:.1f} s", flush=True)


async def check(boot: str, dst: str, want: dict[bytes, bytes], done: str = "joined") -> str:
    """'ok', or what is wrong with the committed output against ``want`` (an order's
    first 10 bytes, its id, to the value written for it)."""
    seen: dict[bytes, bytes] = {}
    twice = wrong = 0
    for r in await read_records(boot, dst, timeout_s=600):
        value = r.value or b""
        twice += value[:10] in seen
        seen[value[:10]] = value
        wrong += want.get(value[:10]) != value
    missing = len(want.keys() - seen.keys())
    if twice or wrong or missing:
        return f"{twice} orders twice, {wrong} {done} wrong, {missing} missing"
    return "ok"


def copied(orders: list[tuple[bytes, int, bytes]], wide: bool) -> dict[bytes, bytes]:
    """What a copy writes for each order (``check``'s ``want``): the order as it is, or
    (``wide``) as ``order|order``."""
    return {v[:10]: (v + b"|" + v if wide else v) for _k, _t, v in orders}


def passed(name: str, check: str) -> bool:
    """Whether a run's check passes: all ok, or for quixstreams (no timestamp order
    across the topics) no order twice and none missing, whatever row each joined."""
    if check == "ok":
        return True
    return name == QUIX and check.startswith("0 orders twice,") and check.endswith(" 0 missing")


async def run(
    name: str, boot: str, topics: tuple[str, str, str], counts: tuple[int, int], args: Any
) -> dict[str, Any]:
    n, total = counts
    state_dir = tempfile.mkdtemp(prefix="eosflow-bench-join-")
    group = f"join-g-{uuid.uuid4().hex[:8]}"
    if name in (STREAMS, STREAMS_COPY):
        streams: JavaContender = args.streams
        warm = args.warm
        if name == STREAMS_COPY:  # JoinRun without the table, warmed as a copy too
            topics = (topics[0], COPY_MARK, topics[2])
            warm = (warm[0], COPY_MARK, warm[2], warm[3])
        cmd = streams.command(*join_args(boot, topics, n, group, state_dir, args.interval, warm))
    else:
        cmd = [sys.executable, "-m", "benchmarks._join_contenders", name, boot, *topics]
        cmd += [str(n), str(total), str(args.interval), group, state_dir]
    try:
        result = await run_contender(name, cmd, n, TIMEOUT_S)
        result["group"] = group
        return result
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


async def prepare_jvm(boot: str, args: argparse.Namespace, version: str) -> None:
    """When a Kafka Streams contender runs (its join or its copy): resolve and compile
    ``JoinRun``, and seed the topics its JVM warms on before each timed run
    (``WARM_RECORDS`` orders, seeded as the input)."""
    args.streams, args.warm = None, ("", "", "", 0)
    if STREAMS not in args.contenders and STREAMS_COPY not in args.contenders:
        return
    args.streams = kafka_streams_join(version, STREAMS_FALLBACK)
    print("preparing the Kafka Streams contender (Maven, javac; cached) ...", flush=True)
    await asyncio.to_thread(args.streams.prepare)
    tag = uuid.uuid4().hex[:6]
    warm = (f"join-warm-orders-{tag}", f"join-warm-customers-{tag}", f"join-warm-out-{tag}")
    await create(boot, *((t, args.partitions) for t in warm))
    rows, orders = history(WARM_RECORDS, min(args.customers, WARM_RECORDS), args.update_every, 8)
    await seed(boot, warm[1], rows)
    await seed(boot, warm[0], orders)
    args.warm = (*warm, WARM_RECORDS)


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


async def main(args: argparse.Namespace) -> int:
    RESULTS.mkdir(exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    out: dict[str, Any] = {"args": dict(vars(args)), "throughput": [], "restore": None}
    ok = True
    async with broker(args) as (boot, described, version):
        out["broker"] = described
        print(f"broker: {described}", flush=True)
        await prepare_jvm(boot, args, version)
        out["kafka_streams_version"] = args.streams.version if args.streams else None
        if args.orders:
            orders, customers = f"join-orders-{tag}", f"join-customers-{tag}"
            await create(boot, (orders, args.partitions), (customers, args.partitions))
            rows, events = history(args.orders, args.customers, args.update_every)
            await seed(boot, customers, rows)
            await seed(boot, orders, events)
            want = expected(rows, events)
            for rep in range(args.reps):
                for name in args.contenders:
                    dst = f"join-out-{tag}-{name}-{rep}"
                    await create(boot, (dst, args.partitions))
                    total = args.orders + (len(rows) if name not in COPIES else 0)
                    r = await run(name, boot, (orders, customers, dst), (args.orders, total), args)
                    if name in COPIES:
                        r["check"] = await check(boot, dst, copied(events, name == WIDE), "copied")
                    else:
                        r["check"] = await check(boot, dst, want)
                    r["rep"] = rep
                    ok &= passed(name, r["check"])
                    out["throughput"].append(r)
                    print(
                        f"  turn {rep + 1} {name}: {r['rate']:,.0f} orders/s, peak RSS "
                        f"{r['rss_peak_mb']:.0f} MiB, check {r['check']}"
                        + (f", CPU {r['cpu_s']:.2f} s" if "cpu_s" in r else ""),
                        flush=True,
                    )
        if args.restore_rows:
            ok &= await restore_run(boot, args, tag, out)
    report(out, args)
    (RESULTS / "join.json").write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


async def restore_run(boot: str, args: argparse.Namespace, tag: str, out: dict[str, Any]) -> bool:
    """The join over ``--restore-rows`` rows, then a fresh instance's restore, timed."""
    n = args.restore_rows
    orders, customers, dst = f"jbig-orders-{tag}", f"jbig-customers-{tag}", f"jbig-out-{tag}"
    await create(boot, *((t, args.partitions) for t in (orders, customers, dst)))
    rows, events = history(max(args.orders // 10, 1), n, 10**9)
    await seed(boot, customers, rows)
    await seed(boot, orders, events)
    topics = (orders, customers, dst)
    joined = await run("eosflow-join", boot, topics, (len(events), len(events) + n), args)
    joined["check"] = await check(boot, dst, expected(rows, events))
    print(f"  {n:,} rows and {len(events):,} orders joined: check {joined['check']}", flush=True)
    state_dir = tempfile.mkdtemp(prefix="eosflow-bench-join-")
    cmd = [sys.executable, "-m", "benchmarks._join_contenders", "eosflow-table-restore", boot]
    cmd += [*topics, str(n), str(n), str(args.interval), joined["group"], state_dir]
    try:
        res = await run_contender("eosflow-table-restore", cmd, n, TIMEOUT_S)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    res["join_check"] = joined["check"]
    out["restore"] = res
    print(
        f"  restore: {res['restored_records']:,} rows in {res['seconds']:.1f} s, "
        f"peak RSS {res['rss_peak_mb']:.0f} MiB",
        flush=True,
    )
    return bool(joined["check"] == "ok" and res["restored_records"] == n)


def report(out: dict[str, Any], args: argparse.Namespace) -> None:
    rows = out["throughput"]
    version = out.get("kafka_streams_version")
    streams = f"; Kafka Streams {version}" if version else ""
    if rows:
        print(
            f"\n{args.orders:,} orders against {args.customers:,} customers (a row updated "
            f"every {args.update_every} orders), 100 B, {args.partitions} partitions, commit "
            f"interval {args.interval:g} s, medians of {args.reps} turns (min-max); "
            f"{out['broker']}{streams}\n"
        )
        print("| contender | orders/s | peak RSS MiB | checks |")
        print("|---|---:|---:|---|")
        by = {n: [r for r in rows if r["contender"] == n] for n in args.contenders}
        for name, mine in by.items():
            rates = [r["rate"] for r in mine]
            checks = (
                "all ok"
                if all(r["check"] == "ok" for r in mine)
                else "; ".join(sorted({r["check"] for r in mine if r["check"] != "ok"}))
            )
            print(
                f"| {name} | {statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"
                f" | {_median(mine, 'rss_peak_mb'):.0f} | {checks} |"
            )
        for a, b, target in (
            ("eosflow-join", "eosflow-copy", "0.6x"),
            ("eosflow-join", STREAMS, "1.0x"),
            ("eosflow-join", QUIX, ""),
            ("eosflow-join", WIDE, ""),
            (WIDE, "eosflow-copy", ""),
            (STREAMS, STREAMS_COPY, ""),
        ):
            if by.get(a) and by.get(b):
                ratio = _median(by[a], "rate") / _median(by[b], "rate")
                faster = sum(x["rate"] > y["rate"] for x, y in zip(by[a], by[b], strict=False))
                print(
                    f"{a} / {b}: {ratio:.2f}x, faster in {faster} of {len(by[a])} turns"
                    + (f" (target >= {target})" if target else "")
                )
    if out["restore"]:
        r = out["restore"]
        print(f"restore: {r['restored_records']:,} rows in {r['seconds']:.1f} s (target under 5 s)")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", default="fake", help="fake, or genuine[:version]")
    ap.add_argument("--orders", type=int, default=200_000, help="0: skip the throughput part")
    ap.add_argument("--customers", type=int, default=20_000)
    ap.add_argument("--update-every", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--interval", type=float, default=0.1, help="commit interval, seconds")
    ap.add_argument("--restore-rows", type=int, default=0, help="the restore run")
    ap.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS + MORE)
    args = ap.parse_args(argv)
    args.broker_latency_ms, args.pin = 0.0, False  # the broker's options, unused here
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
