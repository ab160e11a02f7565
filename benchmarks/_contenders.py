"""One benchmark contender in its own process: copy ``src`` to ``dst`` exactly once.

    python -m benchmarks._contenders NAME BOOTSTRAP SRC DST RECORDS COMMIT_INTERVAL_S TXN_RECORDS \
        WORK_ROUNDS

NAME is ``eosflow``, ``eosflow-serial`` (eosflow with ``process_ahead`` off: nothing is
processed while a commit is in flight), ``aiokafka`` or ``quixstreams``. Prints one JSON
line: records,
seconds from the first record processed to the last commit, and peak RSS (MiB). Every
contender copies values verbatim, so the parent can measure latency from the values.
WORK_ROUNDS > 0 gives every contender the same CPU work per record (``work``: that many
chained SHA-256 rounds over the value, the digest discarded); 0 is a pass-through.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import resource
import sys
import time
import uuid
from pathlib import Path
from typing import Any

WORK_ROUNDS = 0  # set by main()


def work(value: bytes | None) -> None:
    """The per-record work every contender does (nothing when WORK_ROUNDS is 0)."""
    v = value or b""
    for _ in range(WORK_ROUNDS):
        v = hashlib.sha256(v).digest()


def _peak_rss_mb() -> float:
    """This process's own peak RSS. Not ``getrusage().ru_maxrss``: Linux carries the
    parent's high-water mark across fork+exec into it, so every contender would report
    the benchmark parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run_eosflow(
    boot: str, src: str, dst: str, n: int, interval: float, txn: int, ahead: bool = True
) -> float:
    import eosflow

    first: list[float] = []

    class Copy(eosflow.Processor):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if not first:
                first.append(time.monotonic())
            work(record.value)
            return eosflow.Output(dst, record.value, key=record.key, partition=record.partition)

    config = eosflow.EosConfig(
        bootstrap_servers=boot,
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        input_topics=(src,),
        transactional_id=f"bench-{uuid.uuid4().hex[:8]}",
        commit_interval_s=interval,
        max_records_per_txn=txn,
        process_ahead=ahead,
    )
    app = eosflow.EosApp(Copy(), config)
    async with app:
        while not (app.stats.records >= n and not app.in_transaction):
            if app.failure is not None:
                raise app.failure
            await asyncio.sleep(0.005)
        done = time.monotonic()
    return done - first[0]


async def run_aiokafka(boot: str, src: str, dst: str, n: int, interval: float, txn: int) -> float:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import OffsetAndMetadata

    group = f"bench-{uuid.uuid4().hex[:8]}"
    consumer = AIOKafkaConsumer(
        src,
        bootstrap_servers=boot,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(bootstrap_servers=boot, transactional_id=group, retry_backoff_ms=10)
    await consumer.start()
    await producer.start()
    done = 0
    first = 0.0
    try:
        while done < n:
            batch = await consumer.getmany(timeout_ms=int(interval * 1000), max_records=txn)
            if not batch:
                continue
            first = first or time.monotonic()
            async with producer.transaction():
                offsets = {}
                for tp, records in batch.items():
                    for r in records:
                        work(r.value)
                        await producer.send(dst, r.value, key=r.key, partition=tp.partition)
                    offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "")
                    done += len(records)
                await producer.send_offsets_to_transaction(offsets, group)
        return time.monotonic() - first
    finally:
        await consumer.stop()
        await producer.stop()


def run_quixstreams(boot: str, src: str, dst: str, n: int, interval: float, txn: int) -> float:
    from quixstreams import Application

    app = Application(
        broker_address=boot,
        consumer_group=f"bench-{uuid.uuid4().hex[:8]}",
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        commit_interval=interval,
        loglevel="WARNING",
        auto_create_topics=False,
    )
    t_in = app.topic(src, value_deserializer="bytes", key_deserializer="bytes")
    t_out = app.topic(dst, value_serializer="bytes", key_serializer="bytes")
    seen = [0]
    first: list[float] = []

    def count(value: Any) -> None:
        if not first:
            first.append(time.monotonic())
        work(value)
        seen[0] += 1
        if seen[0] >= n:
            app.stop()  # graceful: the final checkpoint commits the last transaction

    app.dataframe(t_in).update(count).to_topic(t_out)
    app.run()
    return time.monotonic() - first[0]


def main() -> None:
    name, boot, src, dst = sys.argv[1:5]
    n, interval, txn = int(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
    global WORK_ROUNDS
    WORK_ROUNDS = int(sys.argv[8])
    if name == "quixstreams":
        seconds = run_quixstreams(boot, src, dst, n, interval, txn)
    elif name == "aiokafka":
        seconds = asyncio.run(run_aiokafka(boot, src, dst, n, interval, txn))
    elif name in ("eosflow", "eosflow-serial"):
        ahead = name == "eosflow"
        seconds = asyncio.run(run_eosflow(boot, src, dst, n, interval, txn, ahead))
    else:
        raise SystemExit(f"unknown contender {name!r}")
    print(
        json.dumps(
            {"contender": name, "records": n, "seconds": seconds, "rss_peak_mb": _peak_rss_mb()}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
