"""End-to-end latency of ``compare.py``'s contenders: a producer writes ``--rate``
records/s with the send time in the value, a read_committed reader timestamps their
arrival; p50/p99 per run, ``--latency-reps`` runs per contender in turns."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import time
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from benchmarks._clock import p50_p99
from benchmarks._harness import check, contender, create, settle

NO_LATENCY = {"kafka-copier"}  # copies what its input holds at its assignment, then exits


async def joined(boot: str, group: str, runner: asyncio.Task[Any], timeout_s: float = 60) -> None:
    """Until ``group`` is Stable (the contender joined and has its partitions), plus 1 s
    for it to fetch its offsets and start fetching; at most ``timeout_s``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=boot)
    await admin.start()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not runner.done():
            try:
                described = await admin.describe_consumer_groups([group])
            except KafkaError as exc:  # a fresh broker's coordinator may not be there yet
                if not exc.retriable:
                    raise
                await asyncio.sleep(0.2)
                continue
            states = [g[2] for resp in described for g in resp.groups]
            if states == ["Stable"]:
                break
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    await asyncio.sleep(1.0)


LEAD_S = 2.0
"""The load runs this long before the ``--latency-s`` whose records are counted. A
contender's group is Stable before the load starts, but Kafka Streams still sets its
tasks up after that: counted from the first record, its p99 was its start (~250-440 ms
over 10 s, whatever its commit rule), not its steady state."""


async def latency(boot: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """p50/p99 from produce to read_committed visibility at ``--rate`` records/s, over the
    records sent in ``--latency-s`` after ``LEAD_S`` of the same load."""
    src, dst = f"lat-in-{uuid.uuid4().hex[:8]}", f"lat-out-{uuid.uuid4().hex[:8]}"
    group = f"bench-{uuid.uuid4().hex[:8]}"
    await create(boot, (src, 3), (dst, 3))
    lead = int(args.rate * LEAD_S)
    n = lead + int(args.rate * args.latency_s)
    runner = asyncio.create_task(contender(name, boot, src, dst, n, 0.1, args, group))
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
    counted_from = [0]  # the send time (ns) of the first record counted

    async def read() -> None:
        seen = 0
        while seen < n:
            batch = await reader.getmany(timeout_ms=100)
            now = time.time_ns()
            for records in batch.values():
                seen += len(records)
                sent = (struct.unpack_from(">q", r.value or b"")[0] for r in records)
                lat.extend((now - t) / 1e6 for t in sent if t >= counted_from[0])

    reading = asyncio.create_task(read())
    await joined(boot, group, runner)  # the clock runs once the contender consumes
    started = time.monotonic()
    counted_from[0] = time.time_ns() + int(LEAD_S * 1e9)  # before any counted record is read
    pad = b"x" * max(args.size - 8, 0)
    for i in range(n):
        due = started + i / args.rate
        if (wait := due - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        await producer.send(src, struct.pack(">q", time.time_ns()) + pad, partition=i % 3)
    await producer.flush()
    await asyncio.wait_for(reading, 120)
    ran = await runner
    await producer.stop()
    await reader.stop()
    p50, p99 = p50_p99(lat)
    result: dict[str, Any] = {"p50_ms": p50, "p99_ms": p99}
    result["n"] = len(lat)
    if "commits" in ran:  # eosflow's and Kafka Streams': how many transactions it took
        result["commits_per_s"] = ran["commits"] / (LEAD_S + args.latency_s)
    result.update({k: v for k, v in ran.items() if k.startswith("commits_")})
    if args.check:  # the values carry unique send times: match by value
        await check(boot, src, dst, group, "value", result)
    return result


async def latencies(
    boot: str, names: list[str], args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """``--latency-reps`` latency runs of every contender, in turns rotated like the
    throughput runs; per contender the median p50 and p99 of its runs. A p99 over 10 s at
    2,000 rec/s is set by the slowest 200 records -- a few transactions -- so one run
    alone moved by 15-30 ms between consecutive runs of the same contender here. An
    untimed run comes first: the first latency run after the throughput runs was the
    slowest whoever made it (p50/p99 ~50/120 ms against ~35/88 second)."""
    print("  latency warm-up (untimed) ...", flush=True)
    warm = argparse.Namespace(**{**vars(args), "latency_s": 3.0, "check": False})
    await latency(boot, names[0], warm)
    turn = [n for n in names if n not in NO_LATENCY]
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in turn}
    for rep in range(args.latency_reps):
        for name in turn[rep % len(turn) :] + turn[: rep % len(turn)]:
            await settle()
            lat = await latency(boot, name, args)
            runs[name].append(lat)
            verdict = "" if "exactly_once" not in lat else lat["check"].splitlines()[0]
            print(
                f"  latency rep {rep + 1}: {name:14s} p50 {lat['p50_ms']:.0f} ms, "
                f"p99 {lat['p99_ms']:.0f} ms at {args.rate:g} rec/s  {verdict}",
                flush=True,
            )
    return {n: summary(rs) for n, rs in runs.items()}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A contender's latency runs: median p50 and p99, every run kept, and exactly once
    only if every run was."""
    out: dict[str, Any] = {
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p99_ms": statistics.median(r["p99_ms"] for r in runs),
        "runs": runs,
    }
    checked = [r["exactly_once"] for r in runs if "exactly_once" in r]
    if checked:
        out["exactly_once"] = all(checked)
        out["check"] = next((r["check"] for r in runs if not r["exactly_once"]), runs[0]["check"])
    return out
