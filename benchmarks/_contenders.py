"""One benchmark contender in its own process: copy ``src`` to ``dst`` exactly once.

    python -m benchmarks._contenders NAME BOOTSTRAP SRC DST RECORDS COMMIT_INTERVAL_S TXN_RECORDS \
        WORK_ROUNDS GROUP

NAME is ``eosflow`` (its defaults), ``eosflow-ahead`` (eosflow with ``process_ahead`` on:
the next records are processed while a commit is in flight), ``aiokafka``, ``librdkafka``
(a confluent-kafka transactional loop) or ``quixstreams``; the Kafka Streams contender is
a Java program (``java/PassThrough.java``) printing the same line. GROUP is the consumer group (and
transactional id), so that the parent can check the committed offsets afterwards. Prints
one JSON line: records, seconds from the first record processed to the last commit, and
peak RSS (MiB); eosflow also its peak RSS once a tenth of the records were processed
(``hwm_tenth_mb``: memory flat in record count means the final peak stays near it; until
2026-11-26 the current RSS then, ``rss_tenth_mb``, which a transient peak later in the run
always exceeds even when nothing grows). Every
contender copies keys and values verbatim, so the parent can check the output and measure
latency from the values.
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
from pathlib import Path
from typing import Any

WORK_ROUNDS = 0  # set by main()


def work(value: bytes | None) -> None:
    """The per-record work every contender does (nothing when WORK_ROUNDS is 0)."""
    v = value or b""
    for _ in range(WORK_ROUNDS):
        v = hashlib.sha256(v).digest()


def _peak_rss_mb(field: str = "VmHWM") -> float:
    """This process's own peak RSS (``field="VmRSS"``: the current one). Not
    ``getrusage().ru_maxrss``: Linux carries the parent's high-water mark across fork+exec
    into it, so every contender would report the benchmark parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


EXTRA: dict[str, float] = {}  # further measurements for the JSON line


async def run_eosflow(
    boot: str,
    src: str,
    dst: str,
    n: int,
    interval: float,
    txn: int,
    group: str,
    ahead: bool | None,
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
        group_id=group,
        input_topics=(src,),
        transactional_id=group,
        commit_interval_s=interval,
        **({} if ahead is None else {"process_ahead": ahead}),  # None: eosflow's default
        **({"max_records_per_txn": txn} if txn else {}),  # 0: eosflow's default
    )
    app = eosflow.EosApp(Copy(), config)
    async with app:
        while not (app.stats.records >= n and not app.in_transaction):
            if app.failure is not None:
                raise app.failure
            if "hwm_tenth_mb" not in EXTRA and app.stats.records >= n // 10:
                EXTRA["hwm_tenth_mb"] = _peak_rss_mb()
                EXTRA["rss_tenth_mb"] = _peak_rss_mb("VmRSS")
            await asyncio.sleep(0.005)
        done = time.monotonic()
    EXTRA["commits"] = app.stats.committed
    return done - first[0]


async def run_aiokafka(
    boot: str, src: str, dst: str, n: int, interval: float, txn: int, group: str
) -> float:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import OffsetAndMetadata

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


def run_librdkafka(
    boot: str, src: str, dst: str, n: int, interval: float, txn: int, group: str
) -> float:
    """confluent-kafka's transactional loop: consume up to ``txn`` records (waiting at
    most ``interval``), produce each, send_offsets_to_transaction, commit."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": boot,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })  # fmt: skip
    producer = Producer({
        "bootstrap.servers": boot,
        "transactional.id": group,
        "retry.backoff.ms": 10,  # as the aiokafka loop: CONCURRENT_TRANSACTIONS after a commit
    })  # fmt: skip
    producer.init_transactions(30)
    consumer.subscribe([src])
    done = 0
    first = 0.0
    try:
        while done < n:
            msgs = consumer.consume(num_messages=txn, timeout=interval)
            if not msgs:
                continue
            first = first or time.monotonic()
            producer.begin_transaction()
            offsets: dict[int, int] = {}
            for m in msgs:
                if m.error() is not None:
                    raise KafkaException(m.error())
                value = m.value()
                work(value)
                producer.produce(dst, value, m.key(), partition=m.partition())
                offsets[m.partition()] = m.offset() + 1
            done += len(msgs)
            producer.send_offsets_to_transaction(
                [TopicPartition(src, p, o) for p, o in offsets.items()],
                consumer.consumer_group_metadata(),
            )
            producer.commit_transaction()
        return time.monotonic() - first
    finally:
        consumer.close()


def run_quixstreams(
    boot: str, src: str, dst: str, n: int, interval: float, txn: int, group: str
) -> float:
    from quixstreams import Application

    app = Application(
        broker_address=boot,
        consumer_group=group,
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
    group = sys.argv[9]
    if name == "quixstreams":
        seconds = run_quixstreams(boot, src, dst, n, interval, txn, group)
    elif name == "librdkafka":
        seconds = run_librdkafka(boot, src, dst, n, interval, txn, group)
    elif name == "aiokafka":
        seconds = asyncio.run(run_aiokafka(boot, src, dst, n, interval, txn, group))
    elif name in ("eosflow", "eosflow-ahead"):
        ahead = True if name == "eosflow-ahead" else None
        seconds = asyncio.run(run_eosflow(boot, src, dst, n, interval, txn, group, ahead))
    else:
        raise SystemExit(f"unknown contender {name!r}")
    line = {"contender": name, "records": n, "seconds": seconds, "rss_peak_mb": _peak_rss_mb()}
    print(json.dumps({**line, **EXTRA}), flush=True)


if __name__ == "__main__":
    main()
