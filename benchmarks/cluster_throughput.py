"""How fast the test cluster carries an exactly-once loop.

The cluster runs in its own process (``python -m eosflow.testing``, or any broker named by
``EOSFLOW_BENCH_BOOTSTRAP``). A hand-written aiokafka consume-transform-produce loop reads
``--records`` records of ``--size`` bytes and writes them back in transactions of
``--txn-records`` records (getmany, send, send_offsets_to_transaction, commit). Prints and
writes (``benchmarks/results/cluster_throughput.json``) records per second per run.

    python -m benchmarks.cluster_throughput --records 200000 --runs 3

Target (issue "eosflow.testing"): at least 30,000 records/s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata

RESULTS = Path(__file__).parent / "results"


async def start_cluster(latency_ms: float = 0.0) -> tuple[asyncio.subprocess.Process | None, str]:
    named = os.environ.get("EOSFLOW_BENCH_BOOTSTRAP")
    if named:
        return None, named
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eosflow.testing",
        "--log-level",
        "error",
        "--latency-ms",
        str(latency_ms),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().split()
    return proc, line[1]


async def seed(bootstrap: str, topic: str, dst: str, n: int, size: int, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(t, partitions, 1) for t in (topic, dst)])
    await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    payload = b"x" * size
    futs = [await producer.send(topic, payload, partition=i % partitions) for i in range(n)]
    await asyncio.gather(*futs)
    await producer.stop()


async def eos_loop(bootstrap: str, src: str, dst: str, n: int, txn_records: int) -> float:
    group, txn_id = f"bench-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    consumer = AIOKafkaConsumer(
        src,
        bootstrap_servers=bootstrap,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=txn_id,
        max_batch_size=256 * 1024,
        retry_backoff_ms=10,
    )
    await consumer.start()
    await producer.start()
    done = 0
    started = time.monotonic()
    try:
        while done < n:
            batch = await consumer.getmany(timeout_ms=1000, max_records=txn_records)
            if not batch:
                continue
            async with producer.transaction():
                offsets = {}
                for tp, records in batch.items():
                    for r in records:
                        await producer.send(dst, r.value, partition=tp.partition)
                    offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "")
                    done += len(records)
                await producer.send_offsets_to_transaction(offsets, group)
        elapsed = time.monotonic() - started
        # a plain (non-stable) offset fetch may show the previous commit for a few ms
        deadline = time.monotonic() + 5
        while (
            committed := sum([await consumer.committed(tp) or 0 for tp in consumer.assignment()])
        ) != n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"loop committed {committed} offsets, expected {n}")
            await asyncio.sleep(0.01)
        return done / elapsed
    finally:
        await consumer.stop()
        await producer.stop()


async def main(args: argparse.Namespace) -> None:
    proc, bootstrap = await start_cluster()
    rates = []
    try:
        for run in range(args.runs):
            tag = uuid.uuid4().hex[:6]
            src, dst = f"bench-in-{tag}", f"bench-out-{tag}"
            await seed(bootstrap, src, dst, args.records, args.size, args.partitions)
            rate = await eos_loop(bootstrap, src, dst, args.records, args.txn_records)
            rates.append(rate)
            print(f"run {run + 1}: {rate:,.0f} records/s", flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            await proc.wait()
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}",
        "broker": os.environ.get("EOSFLOW_BENCH_BOOTSTRAP") or "eosflow test cluster (own process)",
        "records": args.records,
        "size": args.size,
        "txn_records": args.txn_records,
        "partitions": args.partitions,
        "rates": [round(r) for r in rates],
        "median": round(statistics.median(rates)),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster_throughput.json").write_text(json.dumps(result, indent=2))
    print(f"median {result['median']:,} records/s over {args.runs} runs (target 30,000)")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--txn-records", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--runs", type=int, default=3)
    asyncio.run(main(p.parse_args()))
