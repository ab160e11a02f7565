"""How long after a commit its offsets stay invisible to a plain offset fetch (issue 23):
the window ``post_commit_delay_s`` (200 ms by default) must cover.

    python -m benchmarks offset-visibility                       # 1 broker, 4.4.0
    python -m benchmarks offset-visibility --brokers 3 --load 5000

Where a new owner cannot fetch with RequireStable (a pre-2.5 cluster without KIP-447, or
``require_stable_fetch_offsets=false``), it reads whatever ``__consumer_offsets`` holds:
offsets committed in a transaction appear there only once the coordinator has written
the commit marker to it, which happens *after* EndTxn is answered. A partition that moves
inside that window starts again from the previous offset and the records between are
processed twice. The session therefore holds revocations back for
``post_commit_delay_s`` after each commit.

Each of ``--iterations`` transactions writes one record and commits the next offset of a
partition for the group; from the moment EndTxn is answered, OffsetFetch without
RequireStable (aiokafka's admin client) is asked back to back until it answers that
offset. The figure per transaction is that time, the window a moved partition would hit.
``--load`` records/s of a second transactional producer keep the brokers busy meanwhile
(its commits queue markers too); ``--brokers 3`` replicates everything three times
(``min.insync.replicas=2``), so markers wait for followers.

Every broker is started from Kafka's jars on 127.0.0.1 and stopped by pid. Prints the
percentiles and the number of fetches that saw the old offset.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata

from eosflow.testing._genuine import DEFAULT_VERSION, GenuineKafka

RESULTS = Path(__file__).resolve().parent / "results"
GROUP, TOPIC, LOAD_TOPIC = "visibility-g", "visibility", "visibility-load"


async def _load(bootstrap: str, rate: float, stop: asyncio.Event) -> int:
    """Transactions of ``rate`` records/s (10 per second) until ``stop``; records sent."""
    if rate <= 0:
        return 0
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="visibility-load")
    await p.start()
    sent, per_txn = 0, max(1, int(rate / 10))
    try:
        while not stop.is_set():
            began = time.monotonic()
            async with p.transaction():
                for i in range(per_txn):
                    await p.send(LOAD_TOPIC, b"x" * 100, partition=i % 3)
            sent += per_txn
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - began)))
    finally:
        await p.stop()
    return sent


async def measure(bootstrap: str, iterations: int) -> tuple[list[float], list[int]]:
    """Per transaction: ms from EndTxn answered to the offset seen; fetches that saw the
    old one."""
    tp = TopicPartition(TOPIC, 0)
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="visibility-tx")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await p.start()
    await admin.start()
    lags: list[float] = []
    stale: list[int] = []
    try:
        for i in range(1, iterations + 1):
            async with p.transaction():
                await p.send(TOPIC, b"v", partition=0)
                await p.send_offsets_to_transaction({tp: OffsetAndMetadata(i, "")}, GROUP)
            answered, misses = time.monotonic(), 0
            while True:
                seen = (await admin.list_consumer_group_offsets(GROUP, partitions=[tp])).get(tp)
                if seen is not None and seen.offset == i:
                    break
                misses += 1
            lags.append((time.monotonic() - answered) * 1000)
            stale.append(misses)
            if i % 100 == 0:
                print(f"  {i}/{iterations} transactions", flush=True)
    finally:
        await admin.close()
        await p.stop()
    return lags, stale


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(args: argparse.Namespace) -> int:
    kafka = GenuineKafka(args.version, brokers=args.brokers, auto_create_topics=False)
    print(f"starting Apache Kafka {args.version}, {args.brokers} broker(s) ...", flush=True)
    await kafka.start()
    try:
        bs = kafka.bootstrap_servers
        admin = AIOKafkaAdminClient(bootstrap_servers=bs)
        await admin.start()
        try:
            rf = args.brokers
            await admin.create_topics([NewTopic(TOPIC, 1, rf), NewTopic(LOAD_TOPIC, 3, rf)])
        finally:
            await admin.close()
        stop = asyncio.Event()
        loading = asyncio.create_task(_load(bs, args.load, stop))
        await asyncio.sleep(1.0 if args.load else 0.0)  # the load under way first
        try:
            lags, stale = await measure(bs, args.iterations)
        finally:
            stop.set()
            loaded = await loading
    finally:
        await kafka.stop()
    seen_old = sum(1 for m in stale if m)
    figures = {
        "p50_ms": round(statistics.median(lags), 2),
        "p99_ms": round(_pct(lags, 0.99), 2),
        "max_ms": round(max(lags), 2),
        "transactions": len(lags),
        "fetches_seeing_the_old_offset": seen_old,
        "load_records": loaded,
    }
    print(
        f"\nKafka {args.version}, {args.brokers} broker(s), load {args.load:g} rec/s: "
        f"EndTxn answered -> offset visible to a plain OffsetFetch over {len(lags)} "
        f"transactions: p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms, max "
        f"{figures['max_ms']} ms; the first fetch saw the old offset in {seen_old}"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"offset-visibility-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"args": vars(args), "figures": figures}, indent=2))
    print(f"results: {path}")
    return 0


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks offset-visibility",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", default=DEFAULT_VERSION, help="Apache Kafka version")
    p.add_argument("--brokers", type=int, default=1, choices=(1, 3))
    p.add_argument("--iterations", type=int, default=500)
    p.add_argument("--load", type=float, default=0.0, help="records/s of a concurrent writer")
    return p.parse_args()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(parse())))
