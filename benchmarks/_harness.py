"""Running one contender of ``compare.py``: the topics, the budget it is handed, its
process, and the exactly-once check after it. Shared by ``compare.py``, ``_latency.py``,
``txn_end.py`` and ``state_bench.py``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from benchmarks._bench_broker import PIN_CONTENDER
from benchmarks._budget import Budget
from benchmarks._jvm import JavaContender, copier_args, streams_args
from eosflow.testing import check_exactly_once

RESULTS = Path(__file__).parent / "results"
PYTHON = ["eosflow", "eosflow-ahead", "aiokafka", "librdkafka", "quixstreams"]
JVM = ["kafka-streams", "kafka-copier"]
CONTENDERS = [*PYTHON, *JVM]
CONTENDER_TIMEOUT_S = 900.0


async def create(boot: str, *topics: tuple[str, int]) -> None:
    """Create the topics and wait until every partition has a leader (genuine Kafka
    elects them a moment after answering CreateTopics)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=boot)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, p, 1) for t, p in topics])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            described = await admin.describe_topics([t for t, _ in topics])
            if all(
                t["error_code"] == 0
                and t["partitions"]
                and all(p["error_code"] == 0 and p["leader"] >= 0 for p in t["partitions"])
                for t in described
            ):
                break
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def seed(boot: str, topic: str, n: int, size: int, partitions: int) -> None:
    print(f"  seeding {n:,} records of {size} B on {partitions} partitions ...", flush=True)
    started = time.monotonic()
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    payload = b"x" * size
    futs = [
        await producer.send(topic, payload, key=str(i).encode(), partition=i % partitions)
        for i in range(n)
    ]
    await asyncio.gather(*futs)
    await producer.stop()
    print(f"  seeded in {time.monotonic() - started:.1f} s", flush=True)


async def settle() -> None:
    """Write the page cache's dirty pages out before a timed run (``sync``). A run of
    1,000,000 records leaves ~110 MB of log behind, which the kernel writes back once it
    is 30 s old (``vm.dirty_expire_centisecs``): in the middle of a later contender's run.
    Measured here before this: eosflow at 191,485 rec/s in the turn after the input was
    seeded, 313,403 in the next."""
    await asyncio.to_thread(os.sync)


def budget_of(name: str, args: argparse.Namespace, interval: float) -> Budget:
    """The transaction budget ``name`` runs with: eosflow's defaults for every contender
    (``Budget.defaults``), the interval of the point, ``--txn-records``, ``--txn-bytes``
    and ``--min-txn-s`` for all, and ``--budget-of NAME=RECORDS`` for the one it names."""
    budget = Budget.defaults().but(interval_s=interval)
    if args.txn_records:
        budget = budget.but(records=args.txn_records)
    if args.txn_bytes is not None:
        budget = budget.but(bytes=args.txn_bytes or None)
    if args.min_txn_s is not None:
        budget = budget.but(min_txn_s=args.min_txn_s)
    own = dict(args.budget_of or {})
    return budget.but(records=own[name]) if name in own else budget


def command(
    name: str,
    boot: str,
    topics: tuple[str, str],
    n: int,
    group: str,
    budget: Budget,
    args: argparse.Namespace,
    state_dir: Path,
) -> list[str]:
    """The command line of one run of ``name``: every contender is handed ``budget``."""
    src, dst = topics
    if name == "kafka-streams":
        streams: JavaContender = args.streams
        return streams.command(
            *streams_args(
                boot, src, dst, n, group, args.work_rounds, state_dir, budget, args.jvm_warm,
                args.streams_set or [],
            )
        )  # fmt: skip
    if name == "kafka-copier":
        copier: JavaContender = args.copier
        return copier.command(*copier_args(boot, src, dst, n, group, budget, args.jvm_warm))
    cmd = [sys.executable, "-m", "benchmarks._contenders", name, boot, src, dst, str(n)]
    return [*cmd, str(args.work_rounds), group, *budget.argv()]


async def contender(
    name: str,
    boot: str,
    src: str,
    dst: str,
    n: int,
    interval: float,
    args: argparse.Namespace,
    group: str,
) -> dict[str, Any]:
    """Run one contender's process to the end; its JSON line with ``rate`` added."""
    state_dir = Path(tempfile.mkdtemp(prefix="eosflow-bench-"))
    budget = budget_of(name, args, interval)
    cmd = command(name, boot, (src, dst), n, group, budget, args, state_dir)
    if args.pin:
        cmd = [*PIN_CONTENDER, *cmd]
    try:
        return await run_contender(name, cmd, n)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


async def run_contender(
    name: str, cmd: list[str], n: int, timeout_s: float = CONTENDER_TIMEOUT_S
) -> dict[str, Any]:
    """Run a contender's command to its end and return the last JSON line it printed,
    with ``rate`` (``n`` records over its ``seconds``) added. The process is killed (by
    its pid) if it fails to finish in ``timeout_s`` or we are interrupted; one that fails
    or prints no JSON line is a ``RuntimeError`` with the tails of its output."""
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{name} failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}"
            f"{out.decode(errors='replace')[-2000:]}"
        )
    result: dict[str, Any] = json.loads(lines[-1])
    result["rate"] = n / result["seconds"]
    return result


async def check(boot: str, src: str, dst: str, group: str, match: str, r: dict[str, Any]) -> str:
    """Every input exactly once in ``dst`` (read_committed), and the group's committed
    offsets at the end of ``src``; the verdict goes into ``r``."""
    report = await check_exactly_once(
        boot, src, dst, match="key" if match == "key" else "value", group_id=group
    )
    r["exactly_once"] = report.ok
    r["check"] = report.summary()
    return report.summary() if not report.ok else "exactly once: OK"
