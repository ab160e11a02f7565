"""``python -m benchmarks regroup``: counting by another key, through a repartition topic.

    .venv/bin/python -m benchmarks regroup --broker genuine --records 1000000 --reps 3

The input: ``--records`` records of 100 B keyed by ``--keys`` source keys (placed by key on
``--partitions`` partitions), each value starting with one of ``--new-keys`` new keys and a
``|`` (record i's is ``p%05d`` of i * 7919 mod the new keys: every source key's records
spread over many new keys). The contenders, in turns (A B C A B C ...), each in its own
process into a fresh output topic and group:

- ``eosflow-regroup``: a two-stage ``Pipeline`` (``_regroup_contenders``);
- ``eosflow-regroup-fold``: the same, its counts' topic folded per key per transaction
  (``eosflow.Topic(fold=True)``): the work Kafka Streams' record cache spares it;
- ``kafka-streams-regroup``: ``groupBy(new key).count()`` under exactly_once_v2
  (``java/RegroupCount.java``), warm (its JVM first counts ``WARM_RECORDS`` of a topic
  seeded alike); its version as ``python -m benchmarks run`` picks it. Its record cache
  (10 MiB, Streams' default) folds a key's updates between two commits into one output
  and one changelog record: far fewer records written than the others write;
- ``kafka-streams-regroup-every``: the same with the cache off
  (``statestore.cache.max.bytes=0``): every update emitted, the others' work;
- ``quixstreams-regroup``: ``group_by(new key)`` then a stateful count, exactly-once;
- ``eosflow-count``: the state benchmark's single-stage count by the **source** key (no
  regroup): what the regroup costs eosflow.

Every contender has the same commit interval (``--interval``, 100 ms: Kafka Streams'
default under exactly-once) and otherwise its defaults. Every run is checked against the
input: per new key, the committed counts rise to exactly its number of records -- each
count once, 1..n, for eosflow and quixstreams, which emit every update; Kafka Streams'
record cache folds a key's updates between commits into one output, and so does
``eosflow-regroup-fold``: for those the counts must rise strictly and end at n.
``eosflow-count``: per source key, 1..n.

Targets (reported, never failed on): eosflow-regroup >= 1.0x kafka-streams-regroup and
>= 3x quixstreams-regroup. The broker: as ``python -m benchmarks run`` (``--broker fake``
or ``genuine[:version]``). Writes ``benchmarks/results/regroup.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
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
from benchmarks._jvm import WARM_RECORDS, JavaContender, kafka_streams_regroup, regroup_args
from benchmarks._regroup_contenders import new_key
from benchmarks.compare import STREAMS_FALLBACK
from eosflow.testing import read_topic

STREAMS = "kafka-streams-regroup"
# the same with its record cache off: every update emitted, as eosflow and quixstreams do
STREAMS_EVERY = "kafka-streams-regroup-every"
JVM = (STREAMS, STREAMS_EVERY)
FOLD = "eosflow-regroup-fold"
CONTENDERS = [
    "eosflow-regroup",
    FOLD,
    STREAMS,
    STREAMS_EVERY,
    "quixstreams-regroup",
    "eosflow-count",
]
FOLDS = {STREAMS, FOLD}  # contenders that fold a key's updates between commits
TIMEOUT_S = 1800.0


def value_of(i: int, new_keys: int) -> bytes:
    """Record ``i``'s value: its new key, ``|``, padding to 100 B."""
    head = b"p%05d|" % ((i * 7919) % new_keys)
    return head + b"x" * (100 - len(head))


async def seed(boot: str, topic: str, n: int, keys: int, new_keys: int) -> None:
    print(f"  seeding {n:,} records, {keys:,} keys to {new_keys:,}, into {topic} ...", flush=True)
    started = time.monotonic()
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    try:
        for lo in range(0, n, 100_000):  # acknowledged a slice at a time: bounded memory
            futs = [
                await producer.send(topic, value_of(i, new_keys), key=b"k%d" % (i % keys))
                for i in range(lo, min(n, lo + 100_000))
            ]
            await asyncio.gather(*futs)
    finally:
        await producer.stop()
    print(f"  seeded in {time.monotonic() - started:.1f} s", flush=True)


async def run(
    name: str, boot: str, src: str, dst: str, n: int, args: Any, group: str
) -> dict[str, Any]:
    state_dir = tempfile.mkdtemp(prefix="eosflow-bench-regroup-")
    if name in JVM:
        streams: JavaContender = args.streams
        every = ["statestore.cache.max.bytes=0"] if name == STREAMS_EVERY else []
        cmd = streams.command(
            *regroup_args(boot, (src, dst), n, group, state_dir, args.interval, args.warm),
            *every,
        )
    else:
        module = "_state_contenders" if name == "eosflow-count" else "_regroup_contenders"
        cmd = [sys.executable, "-m", f"benchmarks.{module}", name, boot, src, dst]
        cmd += [str(n), str(args.interval), group, state_dir]
    try:
        result = await run_contender(name, cmd, n, TIMEOUT_S)
        result["contender"] = name  # (the JVM names both of its runs alike)
        return result
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


async def check(name: str, boot: str, src: str, dst: str) -> str:
    """'ok', or what is wrong with the run's committed output (the module's doc)."""
    inputs = await read_topic(boot, src)
    if name == "eosflow-count":
        wanted = Counter(k for _p, _o, k, _v in inputs)
    else:
        wanted = Counter(new_key(v or b"") for _p, _o, _k, v in inputs)
    seen: dict[bytes | None, list[int]] = defaultdict(list)
    for _p, _o, k, v in sorted(await read_topic(boot, dst), key=lambda r: (r[0], r[1])):
        seen[k].append(int(v or b"-1"))
    bad = []
    for key, n in wanted.items():
        counts = seen.get(key, [])
        if name in FOLDS:
            rising = all(a < b for a, b in itertools.pairwise(counts))
            good = bool(counts) and rising and counts[-1] == n
        else:
            good = counts == list(range(1, n + 1))
        if not good:
            bad.append(key)
    stray = set(seen) - set(wanted)
    if bad or stray:
        return f"{len(bad)} of {len(wanted)} keys' counts wrong, {len(stray)} keys not in the input"
    return "ok"


async def prepare_jvm(boot: str, args: argparse.Namespace, version: str) -> None:
    """When ``kafka-streams-regroup`` runs: resolve and compile it, and seed the topic its
    JVM counts before each timed run (``WARM_RECORDS``), as the input is seeded."""
    args.streams, args.warm = None, ("", "", 0)
    if not set(JVM) & set(args.contenders):
        return
    args.streams = kafka_streams_regroup(version, STREAMS_FALLBACK)
    print("preparing the Kafka Streams contender (Maven, javac; cached) ...", flush=True)
    await asyncio.to_thread(args.streams.prepare)
    tag = uuid.uuid4().hex[:6]
    warm = f"regroup-warm-in-{tag}", f"regroup-warm-out-{tag}"
    await create(boot, (warm[0], args.partitions), (warm[1], args.partitions))
    await seed(boot, warm[0], WARM_RECORDS, args.keys, args.new_keys)
    args.warm = (*warm, WARM_RECORDS)


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


async def main(args: argparse.Namespace) -> int:
    RESULTS.mkdir(exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    out: dict[str, Any] = {"args": dict(vars(args)), "throughput": []}
    ok = True
    async with broker(args) as (boot, described, version):
        out["broker"] = described
        print(f"broker: {described}", flush=True)
        await prepare_jvm(boot, args, version)
        out["kafka_streams_version"] = args.streams.version if args.streams else None
        src = f"regroup-in-{tag}"
        await create(boot, (src, args.partitions))
        await seed(boot, src, args.records, args.keys, args.new_keys)
        for rep in range(args.reps):
            for name in args.contenders:
                dst, group = f"regroup-out-{tag}-{name}-{rep}", f"regroup-g-{tag}-{name}-{rep}"
                await create(boot, (dst, args.partitions))
                r = await run(name, boot, src, dst, args.records, args, group)
                r["rep"], r["check"] = rep, await check(name, boot, src, dst)
                ok &= r["check"] == "ok"
                out["throughput"].append(r)
                print(
                    f"  turn {rep + 1} {name}: {r['rate']:,.0f} rec/s, peak RSS "
                    f"{r['rss_peak_mb']:.0f} MiB, check {r['check']}",
                    flush=True,
                )
    report(out, args)
    (RESULTS / "regroup.json").write_text(json.dumps(out, indent=1, default=str))
    return 0 if ok else 1


def report(out: dict[str, Any], args: argparse.Namespace) -> None:
    rows = out["throughput"]
    if not rows:
        return
    version = out.get("kafka_streams_version")
    streams = f"; Kafka Streams {version}" if version else ""
    print(
        f"\n{args.records:,} records x 100 B, {args.keys:,} keys counted by {args.new_keys:,} "
        f"new keys, {args.partitions} partitions, commit interval {args.interval:g} s, "
        f"medians of {args.reps} turns (min-max); {out['broker']}{streams}\n"
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
    print()
    others = (
        (STREAMS, "1.0x"),
        (STREAMS_EVERY, ""),
        ("quixstreams-regroup", "3x"),
        ("eosflow-count", "the price of the regroup"),
    )
    for other, target in others:
        mine, theirs = by.get("eosflow-regroup"), by.get(other)
        if not (mine and theirs):
            continue
        ratio = _median(mine, "rate") / _median(theirs, "rate")
        faster = sum(a["rate"] > b["rate"] for a, b in zip(mine, theirs, strict=False))
        goal = (
            ""
            if not target
            else f" ({target})"
            if target[0].isalpha()
            else f" (target >= {target})"
        )
        print(
            f"eosflow-regroup / {other}: {ratio:.2f}x, faster in {faster} of "
            f"{len(mine)} turns{goal}"
        )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", default="fake", help="fake, or genuine[:version]")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=10_000, help="source keys")
    ap.add_argument("--new-keys", type=int, default=1_000, help="keys counted by")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--interval", type=float, default=0.1, help="commit interval, seconds")
    ap.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS)
    args = ap.parse_args(argv)
    args.broker_latency_ms, args.pin = 0.0, False  # the broker's options, unused here
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
