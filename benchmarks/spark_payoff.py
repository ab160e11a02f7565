"""Where Spark pays off: a heavy transform end to end, Spark (local, standalone, Connect) against
the same logic in plain Python.

The transform, per JSON order: SHA-256 chained ``--rounds`` times over the value,
a regex extraction from a free-text note, and a join with a 1,000,000-row customer table
(segment, region), written back as JSON. Spark does it with built-in functions (codegen in
the JVM, no Python UDF) against a cached reference DataFrame; plain Python with hashlib,
``re`` and a dict. Both give the same outputs (checked on a sample before timing).

Each contender runs in its own process (one Spark session per process), in turns, through
``EosApp`` against the test cluster in its own process (or ``EOSFLOW_BENCH_BOOTSTRAP``),
with ``--txn-records``-record transactions (100,000 by default); every run's output is
checked exactly once. Reported per contender: start-up (process start to the group
join: Spark's session, warm-up and the reference table), end-to-end records/s from the
join to the last commit, and for Spark the median job time per transaction, from which
the per-core job rate follows. ``--modes``: ``python``, ``local`` (``local[*]``),
``standalone`` (a master and a worker with every core) and ``connect`` (a Spark Connect
server over ``local[*]``), both started here from pyspark's jars.

    .venv/bin/python -m benchmarks.spark_payoff --records 500000 --reps 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import eosflow
from eosflow.spark import SparkProcessor

RESULTS = Path(__file__).parent / "results"
CUSTOMERS = 1_000_000
REF = re.compile(rb"ref:([A-Z]{3}-[0-9]+)")
ROUNDS = int(os.environ.get("PAYOFF_ROUNDS", "20"))  # the child learns it from the parent


def order(i: int) -> tuple[bytes, bytes]:
    note = f"order {i} for pickup, ref:{'ABCDEFGH'[i % 8]}XZ-{(i * 7) % 100_000} prio {i % 5}"
    value = {"id": i, "customer": (i * 7919) % CUSTOMERS, "note": note}
    return f"o{i}".encode(), json.dumps(value).encode()


def digest(value: bytes, rounds: int) -> str:
    h = hashlib.sha256(value).hexdigest()
    for _ in range(rounds - 1):
        h = hashlib.sha256(h.encode()).hexdigest()
    return h


class Heavy(eosflow.Processor):
    """The transform in plain Python, a batch at a time."""

    output_topic = "out"

    async def on_start(self) -> None:
        self.customers = {c: (f"seg{c % 17}", f"r{c % 11}") for c in range(CUSTOMERS)}

    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        out = []
        for r in records:
            o = json.loads(r.value or b"")
            segment, region = self.customers.get(o["customer"], (None, None))
            found = REF.search(o["note"].encode())
            v = {
                "id": o["id"],
                "customer": o["customer"],
                "segment": segment,
                "region": region,
                "ref": found.group(1).decode() if found else "",
                "digest": digest(r.value or b"", ROUNDS),
            }
            out.append(eosflow.Output(self.output_topic, json.dumps(v).encode(), key=r.key))
        return out


class SparkHeavy(SparkProcessor):
    """The same transform as one Spark job per transaction."""

    output_topic = "out"

    def prepare(self, spark: Any) -> None:
        from pyspark.sql import functions as F

        self.customers = spark.range(CUSTOMERS).select(
            F.col("id").alias("cid"),
            F.concat(F.lit("seg"), (F.col("id") % 17).cast("string")).alias("segment"),
            F.concat(F.lit("r"), (F.col("id") % 11).cast("string")).alias("region"),
        )
        self.customers.cache().count()

    def transform(self, df: Any) -> Any:
        from pyspark.sql import functions as F

        o = F.from_json(F.col("value").cast("string"), "id LONG, customer LONG, note STRING")
        h = F.sha2(F.col("value"), 256)
        for _ in range(ROUNDS - 1):
            h = F.sha2(h, 256)
        rows = df.select("key", o.alias("o"), h.alias("digest"))
        # the batch is the small side: broadcast it and scan the cached table, rather
        # than shuffling 1,000,000 customers every transaction (that took 3.2 s for a batch of
        # 10,000 orders here; broadcast, 100,000 orders ran end to end in ~6 s)
        batch = F.broadcast(rows)
        joined = batch.join(self.customers, batch["o.customer"] == self.customers["cid"], "left")
        value = F.to_json(
            F.struct(
                F.col("o.id").alias("id"),
                F.col("o.customer").alias("customer"),
                F.col("segment"),
                F.col("region"),
                F.regexp_extract(F.col("o.note"), r"ref:([A-Z]{3}-[0-9]+)", 1).alias("ref"),
                F.col("digest"),
            )
        )
        return joined.select("key", value.alias("value"))


# --- one contender in its own process ---------------------------------------------------


async def child(mode: str, boot: str, src: str, n: int, txn: int) -> dict[str, Any]:
    proc: Heavy | SparkHeavy = Heavy() if mode == "python" else SparkHeavy()
    tag = uuid.uuid4().hex[:8]
    out = f"payoff-out-{tag}"
    proc.output_topic = out
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=boot)
    await admin.start()
    await admin.create_topics([NewTopic(out, 3, 1)])
    await admin.close()
    config = eosflow.EosConfig(
        bootstrap_servers=boot,
        group_id=f"payoff-{tag}",
        input_topics=(src,),
        transactional_id=f"payoff-{tag}",
        commit_interval_s=30.0,
        max_records_per_txn=txn,
        max_bytes_per_txn=256 * 1024 * 1024,
        session_timeout_s=90.0,
        transaction_timeout_s=60.0,  # the Spark job's budget: 45 s
    )
    app = eosflow.EosApp(proc, config)
    begun = time.monotonic()
    jobs: list[float] = []
    async with app:
        while not app.assigned:
            if app.failure is not None:
                raise app.failure
            await asyncio.sleep(0.01)  # polling a measurement, not synchronising
        joined = time.monotonic()
        last = 0
        while not (app.stats.records >= n and not app.in_transaction):
            if app.failure is not None:
                raise app.failure
            if isinstance(proc, SparkHeavy) and app.stats.committed != last:
                last = app.stats.committed
                jobs.append(proc.last_job_s)
            await asyncio.sleep(0.01)
        done = time.monotonic()
        if isinstance(proc, SparkHeavy) and app.stats.committed != last:
            jobs.append(proc.last_job_s)  # the last transaction's job
    from eosflow.testing import check_exactly_once

    report = await check_exactly_once(boot, src, out, group_id=config.group_id)
    return {
        "mode": mode,
        "startup_s": joined - begun,
        "seconds": done - joined,
        "rate": n / (done - joined),
        "job_s": statistics.median(jobs) if jobs else None,
        "transactions": app.stats.committed,
        "exactly_once": report.ok,
        "check": report.summary().splitlines()[0],
    }


# --- the parent -------------------------------------------------------------------------


async def seed(boot: str, n: int) -> str:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    src = f"payoff-in-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=boot)
    await admin.start()
    await admin.create_topics([NewTopic(src, 3, 1)])
    await admin.close()
    p = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=20, max_batch_size=512 * 1024)
    await p.start()
    try:
        for start in range(0, n, 50_000):
            futs = [
                await p.send(src, v, key=k)
                for k, v in map(order, range(start, min(n, start + 50_000)))
            ]
            await asyncio.gather(*futs)
            print(f"  seeded {min(n, start + 50_000):,} of {n:,}", flush=True)
    finally:
        await p.stop()
    return src


async def same_outputs(rounds: int) -> None:
    """The two transforms agree on a sample (in this process: local Spark)."""
    sample = [
        eosflow.Record("in", 0, i, *order(i), (), 1_700_000_000_000) for i in range(0, 5000, 7)
    ]
    py, sp = Heavy(), SparkHeavy()
    await py.on_start()
    await sp.on_start()
    try:
        a = {o.key: json.loads(o.value or b"") for o in await py.process_batch(sample)}
        b = {o.key: json.loads(o.value or b"") for o in await sp.process_batch(sample)}
    finally:
        await sp.on_stop()
    if a != b:
        raise SystemExit("the Spark and Python transforms disagree")
    print(f"  the two transforms agree on {len(a)} sampled orders ({rounds} SHA-256 rounds)")


async def run_child(
    mode: str, boot: str, src: str, args: argparse.Namespace, url: str | None
) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOSFLOW_")}
    env["PAYOFF_ROUNDS"] = str(args.rounds)
    if mode == "connect" and url is not None:
        env["EOSFLOW_SPARK_REMOTE"] = url
    elif url is not None:  # a standalone master: Spark's own settings, as a user's
        env["EOSFLOW_SPARK_MASTER"] = url
        env["PYSPARK_PYTHON"] = sys.executable
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    cmd = [sys.executable, "-m", "benchmarks.spark_payoff", "--child", mode, boot, src]
    cmd += [str(args.records), str(args.txn_records)]
    proc = await asyncio.create_subprocess_exec(
        *cmd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} failed ({proc.returncode}): {err.decode()[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


async def main(args: argparse.Namespace) -> int:
    from benchmarks.cluster_throughput import start_cluster

    os.environ["PAYOFF_ROUNDS"] = str(args.rounds)
    global ROUNDS
    ROUNDS = args.rounds
    await same_outputs(args.rounds)
    cluster, boot = await start_cluster()
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in args.modes}
    try:
        src = await seed(boot, args.records)
        with contextlib.ExitStack() as stack:
            master = None
            remote = None
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="payoff-")))
            cores = os.cpu_count() or 2
            if "standalone" in args.modes:
                from testbed._spark_clusters import standalone

                started = time.monotonic()
                master = stack.enter_context(standalone(home, cores=cores, memory="6g"))
                print(f"  standalone master and worker up in {time.monotonic() - started:.1f} s")
            if "connect" in args.modes:
                from testbed._spark_clusters import connect_server

                started = time.monotonic()
                remote = stack.enter_context(connect_server(home, cores=cores, memory="4g"))
                print(f"  Spark Connect server up in {time.monotonic() - started:.1f} s")
            for rep in range(args.reps):
                for mode in args.modes:
                    url = {"standalone": master, "connect": remote}.get(mode)
                    r = await run_child(mode, boot, src, args, url)
                    runs[mode].append(r)
                    job = f", job {r['job_s']:.2f} s per transaction" if r["job_s"] else ""
                    print(
                        f"  rep {rep + 1} {mode:10s} {r['rate']:9,.0f} rec/s end to end "
                        f"(start-up {r['startup_s']:.1f} s{job}, {r['transactions']} "
                        f"transactions)  {r['check']}",
                        flush=True,
                    )
    finally:
        if cluster is not None:
            cluster.terminate()
            await cluster.wait()
    report(args, runs)
    return 0 if all(r["exactly_once"] for rs in runs.values() for r in rs) else 1


def report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> None:
    cores = os.cpu_count() or 1
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {cores} cores, Python {platform.python_version()}",
        "records": args.records,
        "txn_records": args.txn_records,
        "rounds": args.rounds,
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "spark_payoff.json").write_text(json.dumps(result, indent=2))
    print(
        f"\n{result['date']}, {result['machine']}, {args.records:,} orders, "
        f"{args.txn_records:,}-record transactions, {args.rounds} SHA-256 rounds + regex + "
        f"join with {CUSTOMERS:,} customers\n"
    )
    print("| contender | end-to-end rec/s | start-up | Spark job per txn | job rec/s per core |")
    print("|---|---|---|---|---|")
    for mode, rs in runs.items():
        rate = statistics.median(r["rate"] for r in rs)
        start = statistics.median(r["startup_s"] for r in rs)
        jobs = [r["job_s"] for r in rs if r["job_s"]]
        job = statistics.median(jobs) if jobs else None
        per_core = f"{args.txn_records / job / cores:,.0f}" if job else f"{rate:,.0f} (one thread)"
        job_text = f"{job:.2f} s" if job else "-"
        print(f"| {mode} | {rate:,.0f} | {start:.1f} s | {job_text} | {per_core} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, boot, src, n, txn = sys.argv[2:7]
        print(json.dumps(asyncio.run(child(mode, boot, src, int(n), int(txn)))), flush=True)
        sys.exit(0)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=500_000)
    p.add_argument("--txn-records", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--rounds", type=int, default=20, help="chained SHA-256 rounds per record")
    p.add_argument(
        "--modes",
        nargs="+",
        default=["python", "local", "standalone", "connect"],
        choices=["python", "local", "standalone", "connect"],
    )
    sys.exit(asyncio.run(main(p.parse_args())))
