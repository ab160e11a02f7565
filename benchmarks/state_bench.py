"""``python -m benchmarks state``: exactly-once state, measured.

    .venv/bin/python -m benchmarks state --broker genuine --records 200000 --keys 10000 \
        --reps 3 --restore-keys 1000000

1. **Throughput**, contenders in turns (A B C A B C ...), each in its own process, on the
   same input (``--records`` records of 100 B over ``--keys`` keys, placed by key on
   ``--partitions`` partitions), each into a fresh output topic and group:
   ``eosflow-copy`` (the stateless pass-through, eosflow's defaults), ``eosflow-count``
   (the running count of ``examples/counting.py``, defaults) and ``quixstreams-count``
   (the same count in quixstreams, exactly-once). Every run is checked: each key's
   outputs are exactly 1..n (the copy: each key's outputs as many as its inputs), and for
   eosflow the committed changelog holds every key's count (``check_counts``).
2. **Memory and restore** (``--restore-keys`` N > 0): eosflow-count over N records of N
   distinct keys (peak RSS against the RSS after a tenth: flat means the store is on
   disk), then a fresh instance of the same group restores every store from the
   changelog (N data records plus the position records): the time from its start to
   every partition ready.

With ``--contenders ... eosflow-window quixstreams-window kafka-streams-window``: a count
per key in 60 s tumbling windows (5 s grace) of event time -- the records are a millisecond
apart -- each window's final once, when it closes (checked with ``check_windows`` against
the input: the windows the input's end closes; the last, still open, has no final).
``kafka-streams-window`` is Kafka Streams' windowed count with ``suppress`` (``java/
WindowCount.java``, exactly_once_v2, PassThrough's settings, the commit interval), warm:
its JVM first counts ``WARM_RECORDS`` of a topic seeded alike (its own event times, its
windows closing) with an instance of its own; its version as ``python -m benchmarks run``
picks it (the broker's, else ``STREAMS_FALLBACK``).

Targets (reported, never failed on): count >= 0.7x copy; eosflow-count >= 1.0x
quixstreams-count; window >= 0.6x copy, eosflow-window >= 2x quixstreams-window;
restore of 1,000,000 records under 10 s; peak RSS under 200 MiB over
1,000,000 distinct keys. The broker: as ``python -m benchmarks run`` (``--broker fake`` or
``genuine[:version]``). Writes ``benchmarks/results/state.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

from aiokafka import AIOKafkaProducer

from benchmarks._bench_broker import broker
from benchmarks._harness import RESULTS, create, run_contender
from benchmarks._jvm import WARM_RECORDS, JavaContender, kafka_streams_window, window_args
from benchmarks._state_contenders import EVENT_EVERY_MS, WINDOW
from benchmarks.compare import STREAMS_FALLBACK
from eosflow.testing import check_counts, check_windows, read_topic

CONTENDERS = ["eosflow-copy", "eosflow-count", "quixstreams-count"]
STREAMS_WINDOW = "kafka-streams-window"  # java/WindowCount.java
WINDOWS = ["eosflow-window", "quixstreams-window", STREAMS_WINDOW]  # --contenders
OPS = ["eosflow-copy-bare", "eosflow-copy-ops"]  # python -m benchmarks metrics
TIMEOUT_S = 1800.0


async def seed(boot: str, topic: str, n: int, keys: int) -> None:
    print(f"  seeding {n:,} records over {keys:,} keys into {topic} ...", flush=True)
    started = time.monotonic()
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    # event times EVENT_EVERY_MS apart, ending at this minute: never in the future (a
    # broker refuses times more than log.message.timestamp.after.max.ms ahead; 10,000,000
    # records a millisecond apart span 2.8 hours)
    start = int(time.time() // 60 * 60_000) - n * EVENT_EVERY_MS
    try:
        payload = b"x" * 100
        for lo in range(0, n, 100_000):  # acknowledged a slice at a time: bounded memory
            futs = [
                await producer.send(
                    topic, payload, key=b"k%d" % (i % keys), timestamp_ms=start + i * EVENT_EVERY_MS
                )
                for i in range(lo, min(n, lo + 100_000))
            ]
            await asyncio.gather(*futs)
    finally:
        await producer.stop()
    print(f"  seeded in {time.monotonic() - started:.1f} s", flush=True)


async def run(
    name: str, boot: str, src: str, dst: str, n: int, args: Any, group: str
) -> dict[str, Any]:
    state_dir = tempfile.mkdtemp(prefix="eosflow-bench-state-")
    if name == STREAMS_WINDOW:
        streams: JavaContender = args.streams
        window = (WINDOW.size_ms, WINDOW.grace_ms)
        cmd = streams.command(
            *window_args(boot, (src, dst), n, group, state_dir, window, args.interval, args.warm)
        )
    else:
        cmd = [sys.executable, "-m", "benchmarks._state_contenders", name, boot, src, dst]
        cmd += [str(n), str(args.interval), group, state_dir]
    try:
        return await run_contender(name, cmd, n, TIMEOUT_S)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


async def check(name: str, boot: str, src: str, dst: str, group: str) -> str:
    """'ok', or what is wrong with the run's output."""
    if name in WINDOWS:
        # every contender writes its finals as JSON {"start", "end", "value"}
        finals = await check_windows(boot, src, dst, WINDOW, decode=_json_final)
        return "ok" if finals.ok and finals.expected else finals.summary()
    if name == "eosflow-count":
        report = await check_counts(
            boot, src, dst, f"{group}--{src}--counts--changelog", group_id=group
        )
        return "ok" if report.ok else report.summary()
    inputs = Counter(k for _p, _o, k, _v in await read_topic(boot, src))
    outputs = await read_topic(boot, dst)
    if name in ("eosflow-copy", *OPS):
        got = Counter(k for _p, _o, k, _v in outputs)
        return (
            "ok"
            if got == inputs
            else f"copy differs on {len(set(got.items()) ^ set(inputs.items()))} keys"
        )
    seen: dict[bytes | None, list[int]] = defaultdict(list)
    for _p, _o, k, v in outputs:
        seen[k].append(int(v or b"-1"))
    bad = [k for k in inputs if sorted(seen.get(k, [])) != list(range(1, inputs[k] + 1))]
    return "ok" if not bad else f"{len(bad)} keys whose outputs are not 1..n"


def _json_final(key: bytes | None, value: bytes | None) -> tuple[bytes, int, Any]:
    """A final as every contender writes it (``WindowCount.java``'s format): JSON
    ``{"start": ms, "end": ms, "value": n}``."""
    body = json.loads(value or b"null")
    return key or b"", int(body["start"]), body["value"]


async def prepare_jvm(boot: str, args: argparse.Namespace, version: str) -> None:
    """When ``kafka-streams-window`` runs: resolve and compile it (the broker's Kafka
    version, else ``compare``'s fallback), and seed the topic its JVM counts before each
    timed run (``WARM_RECORDS``) as the input is seeded: event times a millisecond apart,
    200 s of them at 200,000 records, so that the warm-up's windows close and emit (its
    instance has a stream time of its own)."""
    args.streams, args.warm = None, ("", "", 0)
    if STREAMS_WINDOW not in args.contenders:
        return
    args.streams = kafka_streams_window(version, STREAMS_FALLBACK)
    print("preparing the Kafka Streams contender (Maven, javac; cached) ...", flush=True)
    await asyncio.to_thread(args.streams.prepare)
    warm = f"state-warm-in-{uuid.uuid4().hex[:6]}", f"state-warm-out-{uuid.uuid4().hex[:6]}"
    await create(boot, (warm[0], args.partitions), (warm[1], args.partitions))
    await seed(boot, warm[0], WARM_RECORDS, args.keys)
    args.warm = (*warm, WARM_RECORDS)


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


def _versus(by: dict[str, list[dict[str, Any]]], a: str, b: str, target: str = "") -> None:
    """The ratio of ``a``'s median rate to ``b``'s and the turns ``a`` was faster in."""
    if not (by.get(a) and by.get(b)):
        return
    ratio = _median(by[a], "rate") / _median(by[b], "rate")
    faster = sum(x["rate"] > y["rate"] for x, y in zip(by[a], by[b], strict=False))
    goal = f" (target >= {target})" if target else ""
    print(f"{a} / {b}: {ratio:.2f}x, faster in {faster} of {len(by[a])} turns{goal}")


async def main(args: argparse.Namespace) -> int:
    RESULTS.mkdir(exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    out: dict[str, Any] = {
        "args": dict(vars(args)),
        "throughput": [],
        "memory": None,
        "restore": None,
    }
    ok = True
    async with broker(args) as (boot, described, version):
        out["broker"] = described
        print(f"broker: {described}", flush=True)
        await prepare_jvm(boot, args, version)
        out["kafka_streams_version"] = args.streams.version if args.streams else None
        if args.records:
            src = f"state-in-{tag}"
            await create(boot, (src, args.partitions))
            await seed(boot, src, args.records, args.keys)
            for rep in range(args.reps):
                for name in args.contenders:
                    dst, group = f"state-out-{tag}-{name}-{rep}", f"state-g-{tag}-{name}-{rep}"
                    await create(boot, (dst, args.partitions))
                    r = await run(name, boot, src, dst, args.records, args, group)
                    r["rep"], r["check"] = rep, await check(name, boot, src, dst, group)
                    ok &= r["check"] == "ok"
                    out["throughput"].append(r)
                    print(
                        f"  turn {rep + 1} {name}: {r['rate']:,.0f} rec/s, peak RSS "
                        f"{r['rss_peak_mb']:.0f} MiB, check {r['check']}"
                        + (f", CPU {r['cpu_s']:.2f} s" if "cpu_s" in r else ""),
                        flush=True,
                    )
        if args.restore_keys:
            n = args.restore_keys
            src, dst, group = f"state-big-{tag}", f"state-big-out-{tag}", f"state-big-g-{tag}"
            await create(boot, (src, args.partitions), (dst, args.partitions))
            await seed(boot, src, n, n)
            mem = await run("eosflow-count", boot, src, dst, n, args, group)
            mem["check"] = await check("eosflow-count", boot, src, dst, group)
            ok &= mem["check"] == "ok"
            out["memory"] = mem
            print(
                f"  {n:,} distinct keys: {mem['rate']:,.0f} rec/s, RSS after a tenth "
                f"{mem.get('rss_tenth_mb', 0):.0f} MiB, peak {mem['rss_peak_mb']:.0f} MiB, "
                f"check {mem['check']}",
                flush=True,
            )
            res = await run("eosflow-restore", boot, src, dst, n, args, group)
            out["restore"] = res
            print(
                f"  restore: {res['restored_records']:,} changelog records in "
                f"{res['seconds']:.1f} s ({res['restored_records'] / res['seconds']:,.0f}/s), "
                f"peak RSS {res['rss_peak_mb']:.0f} MiB",
                flush=True,
            )
    report(out, args)
    (RESULTS / "state.json").write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


def report(out: dict[str, Any], args: argparse.Namespace) -> None:
    rows = out["throughput"]
    version = out.get("kafka_streams_version")
    streams = f"; Kafka Streams {version}" if version else ""
    if rows:
        print(
            f"\n{args.records:,} records x 100 B over {args.keys:,} keys, {args.partitions} "
            f"partitions, commit interval {args.interval:g} s, medians of {args.reps} turns "
            f"(min-max); {out['broker']}{streams}\n"
        )
        print("| contender | rec/s | peak RSS MiB | checks |")
        print("|---|---:|---:|---|")
        by = {n: [r for r in rows if r["contender"] == n] for n in args.contenders}
        for name, mine in by.items():
            rates = [r["rate"] for r in mine]
            checks = "all ok" if all(r["check"] == "ok" for r in mine) else "FAILED"
            print(
                f"| {name} | {statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"
                f" | {_median(mine, 'rss_peak_mb'):.0f} | {checks} |"
            )
        if by.get("eosflow-count") and by.get("eosflow-copy"):
            ratio = _median(by["eosflow-count"], "rate") / _median(by["eosflow-copy"], "rate")
            print(f"\ncount / copy: {ratio:.2f}x (target >= 0.7x)")
        if by.get("eosflow-copy-ops") and by.get("eosflow-copy-bare"):
            on, off = by["eosflow-copy-ops"], by["eosflow-copy-bare"]
            ratio = _median(on, "rate") / _median(off, "rate")
            per_turn = ", ".join(
                f"{a['rate'] / b['rate']:.3f}" for a, b in zip(on, off, strict=False)
            )
            print(
                f"\noperations on / off: {ratio:.3f}x, a cost of {(1 - ratio) * 100:.1f}% "
                f"(target under 3%); per turn {per_turn}; "
                f"{sum(r.get('scrapes', 0) for r in on)} scrapes"
            )
        if by.get("eosflow-window") and by.get("eosflow-copy"):
            ratio = _median(by["eosflow-window"], "rate") / _median(by["eosflow-copy"], "rate")
            print(f"window / copy: {ratio:.2f}x (target >= 0.6x)")
        _versus(by, "eosflow-window", "quixstreams-window", "2x")
        _versus(by, "eosflow-window", STREAMS_WINDOW)
        _versus(by, "eosflow-count", "quixstreams-count", "1.0x")
    if out["memory"]:
        m = out["memory"]
        print(
            f"\nmemory, {args.restore_keys:,} distinct keys: RSS after a tenth "
            f"{m.get('rss_tenth_mb', 0):.0f} MiB, peak {m['rss_peak_mb']:.0f} MiB "
            "(target: flat, under 200 MiB)"
        )
    if out["restore"]:
        r = out["restore"]
        print(
            f"restore: {r['restored_records']:,} records in {r['seconds']:.1f} s "
            "(target under 10 s)"
        )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", default="fake", help="fake, or genuine[:version]")
    ap.add_argument("--records", type=int, default=200_000, help="0: skip the throughput part")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--interval", type=float, default=0.1, help="commit interval, seconds")
    ap.add_argument("--restore-keys", type=int, default=0, help="the memory and restore run")
    ap.add_argument(
        "--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS + OPS + WINDOWS
    )
    args = ap.parse_args(argv)
    args.broker_latency_ms, args.pin = 0.0, False  # the broker's options, unused here
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
