"""One benchmark contender in its own process: copy ``src`` to ``dst`` exactly once.

    python -m benchmarks._contenders NAME BOOTSTRAP SRC DST RECORDS WORK_ROUNDS GROUP \
        INTERVAL_S TXN_RECORDS TXN_BYTES MIN_TXN_S

NAME is ``eosflow`` (its defaults), ``eosflow-ahead`` (eosflow with ``process_ahead`` on:
the next records are processed while a commit is in flight), ``aiokafka``, ``librdkafka``
(a confluent-kafka transactional loop) or ``quixstreams``; the Kafka Streams contender is
a Java program (``java/PassThrough.java``) printing the same line. GROUP is the consumer group (and
transactional id), so that the parent can check the committed offsets afterwards. The
last four arguments are the transaction budget every contender gets (``_budget``; 0
bytes: no byte cap). Prints one JSON line: records, seconds from the first record
processed to the group's offsets committed at the end of the input (``_clock``), and
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

from benchmarks._budget import Budget, TxnRule, eosflow_settings, quix_settings
from benchmarks._clock import Finish, p50_p99

IDLE_MS = 100  # a loop's wait for the first records of its next transaction

WORK_ROUNDS = 0  # set by main()


def work(value: bytes | None) -> None:
    """The per-record work every contender does (nothing when WORK_ROUNDS is 0)."""
    v = value or b""
    for _ in range(WORK_ROUNDS):
        v = hashlib.sha256(v).digest()


def peak_rss_mb(field: str = "VmHWM") -> float:
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


def phases() -> Any:
    """An eosflow observer that sums into ``EXTRA``, over the run, the seconds in
    transactions (``in_txn_s``), in each commit step (flush, offsets, heartbeat,
    end_txn: ``TransactionReport.phases``) and between transactions (``between_s``), and
    the records the transactions took (``txn_records``): where the clock goes when it
    is not processing."""
    import eosflow

    class Phases(eosflow.Observer):
        last_end = 0.0

        def transaction_ended(self, report: eosflow.TransactionReport) -> None:
            if self.last_end:
                EXTRA["between_s"] = EXTRA.get("between_s", 0.0) + report.started - self.last_end
            self.last_end = report.ended
            EXTRA["in_txn_s"] = EXTRA.get("in_txn_s", 0.0) + report.duration_s
            EXTRA["txn_records"] = EXTRA.get("txn_records", 0) + report.records
            for phase, began, ended in report.phases:
                EXTRA[f"{phase}_s"] = EXTRA.get(f"{phase}_s", 0.0) + ended - began

    return Phases()


async def run_eosflow(
    boot: str, src: str, dst: str, n: int, budget: Budget, group: str, ahead: bool | None
) -> float:
    import eosflow

    first: list[float] = []
    finish = Finish(boot, group, src, n)

    class Copy(eosflow.Processor):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if not first:
                first.append(time.monotonic())
                EXTRA["cpu0"] = time.process_time()
            work(record.value)
            return eosflow.Output(dst, record.value, key=record.key, partition=record.partition)

    config = eosflow.EosConfig(
        bootstrap_servers=boot,
        group_id=group,
        input_topics=(src,),
        transactional_id=group,
        **eosflow_settings(budget),
        **({} if ahead is None else {"process_ahead": ahead}),  # None: eosflow's default
    )
    steps: dict[str, list[float]] = {}

    class Steps(eosflow.Observer):
        """Each committed transaction's commit (its first step's start to its last
        step's end) and each step (``TransactionReport.phases``), in ms."""

        def transaction_ended(self, report: eosflow.TransactionReport) -> None:
            if report.outcome is not eosflow.Outcome.COMMITTED or not report.phases:
                return
            for phase, began, ended in report.phases:
                steps.setdefault(phase, []).append((ended - began) * 1e3)
            began = min(b for _, b, _ in report.phases)
            steps.setdefault("commit", []).append((max(e for *_, e in report.phases) - began) * 1e3)

    app = eosflow.EosApp(Copy(), config, observers=[Steps()])
    async with app:
        while app.stats.records < n:
            if app.failure is not None:
                raise app.failure
            if "hwm_tenth_mb" not in EXTRA and app.stats.records >= n // 10:
                EXTRA["hwm_tenth_mb"] = peak_rss_mb()
                EXTRA["rss_tenth_mb"] = peak_rss_mb("VmRSS")
            await asyncio.sleep(0.005)
        finish.begin()
        EXTRA["own_s"] = time.monotonic() - first[0]  # its last transaction ended
        EXTRA["cpu_s"] = time.process_time() - EXTRA.pop("cpu0")  # the process's, all threads
        done = await asyncio.to_thread(finish.at)
    EXTRA["commits"] = app.stats.committed
    for step, ms in steps.items():  # reported with the latency run's (``commits_``)
        EXTRA[f"commits_{step}_p50_ms"], EXTRA[f"commits_{step}_p99_ms"] = p50_p99(ms)
    return done - first[0]


async def run_aiokafka(boot: str, src: str, dst: str, n: int, budget: Budget, group: str) -> float:
    """The loop an aiokafka user would write: ``getmany`` batches into one transaction
    until ``TxnRule`` ends it, ``send`` without awaiting each record's delivery (the
    commit flushes), the producer's batches as large as eosflow's."""
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
    producer = AIOKafkaProducer(
        bootstrap_servers=boot,
        transactional_id=group,
        retry_backoff_ms=10,  # aiokafka's 100 ms waits out CONCURRENT_TRANSACTIONS after a commit
        max_batch_size=256 * 1024,  # eosflow's max_batch_bytes
    )
    finish = Finish(boot, group, src, n)
    await consumer.start()
    await producer.start()
    rule = TxnRule(budget)
    done = 0
    first = 0.0
    try:
        while done < n:
            batch = await consumer.getmany(timeout_ms=IDLE_MS, max_records=rule.room())
            if not batch:
                continue
            first = first or time.monotonic()
            rule.begin()
            await producer.begin_transaction()
            offsets = {}
            while True:
                got = nbytes = 0
                for tp, records in batch.items():
                    for r in records:
                        work(r.value)
                        await producer.send(dst, r.value, key=r.key, partition=tp.partition)
                        nbytes += len(r.key or b"") + len(r.value or b"")
                    offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "")
                    got += len(records)
                rule.took(got, nbytes)
                done += got
                if rule.full():
                    break
                wait_ms = round(rule.wait_s() * 1000)
                batch = await consumer.getmany(timeout_ms=wait_ms, max_records=rule.room())
                if not batch:
                    break
            await producer.send_offsets_to_transaction(offsets, group)
            await producer.commit_transaction()
            rule.end()
        finish.begin()
        return await asyncio.to_thread(finish.at) - first
    finally:
        await consumer.stop()
        await producer.stop()


def run_librdkafka(boot: str, src: str, dst: str, n: int, budget: Budget, group: str) -> float:
    """The loop a confluent-kafka user would write: polls (``_fetch``) fill one
    transaction until ``TxnRule`` ends it, ``produce`` each record,
    ``send_offsets_to_transaction`` with the consumer's group metadata, commit."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    consumer = Consumer(librdkafka_consumer(boot, group))
    producer = Producer(librdkafka_producer(boot, group, budget))
    finish = Finish(boot, group, src, n)
    producer.init_transactions(30)
    consumer.subscribe([src])
    rule = TxnRule(budget)
    done = 0
    first = 0.0
    try:
        while done < n:
            msgs = _fetch(consumer, rule.room(), IDLE_MS / 1000)
            if not msgs:
                continue
            first = first or time.monotonic()
            rule.begin()
            producer.begin_transaction()
            offsets: dict[int, int] = {}
            while True:
                nbytes = 0
                for m in msgs:
                    if m.error() is not None:
                        raise KafkaException(m.error())
                    key, value = m.key(), m.value()
                    work(value)
                    _produce(producer, dst, value, key, m.partition())
                    offsets[m.partition()] = m.offset() + 1
                    nbytes += len(key or b"") + len(value or b"")
                rule.took(len(msgs), nbytes)
                done += len(msgs)
                if rule.full():
                    break
                msgs = _fetch(consumer, rule.room(), rule.wait_s())
                if not msgs:
                    break
            producer.send_offsets_to_transaction(
                [TopicPartition(src, p, o) for p, o in offsets.items()],
                consumer.consumer_group_metadata(),
            )
            producer.commit_transaction()
            rule.end()
        finish.begin()
        return finish.at() - first
    finally:
        consumer.close()


def _fetch(consumer: Any, room: int, wait_s: float) -> list[Any]:
    """Up to ``room`` records, as soon as any are there, waiting at most ``wait_s`` for
    the first: what is buffered (``consume`` with no wait), else ``poll`` for one and what
    came with it. ``consume(n, timeout)`` alone waits for all ``n`` or the whole timeout:
    at 2,000 rec/s the loop that used it (until 2026-11-27) waited 100 ms before every
    transaction, and its p50 latency was 72 ms against the aiokafka loop's 23."""
    msgs: list[Any] = consumer.consume(num_messages=room, timeout=0)
    if msgs or wait_s <= 0:
        return msgs
    first = consumer.poll(wait_s)
    if first is None:
        return []
    return [first, *consumer.consume(num_messages=room - 1, timeout=0)] if room > 1 else [first]


def librdkafka_consumer(boot: str, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": boot,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }


def librdkafka_producer(boot: str, group: str, budget: Budget) -> dict[str, Any]:
    """librdkafka's own defaults are already throughput settings (linger.ms 5, batches
    of up to 1 MB); its local queue must hold a whole transaction."""
    return {
        "bootstrap.servers": boot,
        "transactional.id": group,
        "linger.ms": 5,
        "queue.buffering.max.messages": max(100_000, 2 * budget.records),
        "retry.backoff.ms": 10,  # librdkafka's 100 ms waits out CONCURRENT_TRANSACTIONS
    }


def _produce(producer: Any, topic: str, value: Any, key: Any, partition: int) -> None:
    """``produce``, serving delivery reports while the local queue is full."""
    while True:
        try:
            producer.produce(topic, value, key, partition=partition)
            return
        except BufferError:
            producer.poll(0.01)


def run_quixstreams(boot: str, src: str, dst: str, n: int, budget: Budget, group: str) -> float:
    from quixstreams import Application

    app = Application(
        broker_address=boot,
        consumer_group=group,
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        loglevel="WARNING",
        auto_create_topics=False,
        **quix_settings(budget),
    )
    t_in = app.topic(src, value_deserializer="bytes", key_deserializer="bytes")
    t_out = app.topic(dst, value_serializer="bytes", key_serializer="bytes")
    seen = [0]
    first: list[float] = []
    finish = Finish(boot, group, src, n)

    def count(value: Any) -> None:
        if not first:
            first.append(time.monotonic())
        work(value)
        seen[0] += 1
        if seen[0] >= n:
            finish.begin()
            app.stop()  # graceful: the final checkpoint commits the last transaction

    app.dataframe(t_in).update(count).to_topic(t_out)
    app.run()
    return finish.at() - first[0]


def main() -> None:
    name, boot, src, dst, n, rounds, group = sys.argv[1:8]
    budget = Budget.from_argv(sys.argv[8:12])
    global WORK_ROUNDS
    WORK_ROUNDS = int(rounds)
    args = (boot, src, dst, int(n), budget, group)
    if name == "quixstreams":
        seconds = run_quixstreams(*args)
    elif name == "librdkafka":
        seconds = run_librdkafka(*args)
    elif name == "aiokafka":
        seconds = asyncio.run(run_aiokafka(*args))
    elif name in ("eosflow", "eosflow-ahead"):
        ahead = True if name == "eosflow-ahead" else None
        seconds = asyncio.run(run_eosflow(*args, ahead))
    else:
        raise SystemExit(f"unknown contender {name!r}")
    line = {"contender": name, "records": n, "seconds": seconds, "rss_peak_mb": peak_rss_mb()}
    print(json.dumps({**line, **EXTRA}), flush=True)


if __name__ == "__main__":
    main()
