"""``python -m benchmarks join-latency``: what a nonzero ``Table.max_idle_s`` costs a
stream-table join in latency (issue 51.6: should the default be deterministic?).

With ``max_idle_s`` 0 (the default) a live join goes on as soon as the table partition
is read up to its last stable offset; a row produced at t but still on its way may then
land after an order at t that it should have joined, so a live run can differ from a
replay. A nonzero ``max_idle_s`` makes a task wait that long, once per stretch in which
the table partition holds nothing, for such a row. This measures the price: orders at
``--rate`` per second with their send time in the value, the customers table updated
``--row-rate`` times per second (0: never after the start), the join of
``examples/customers.py`` in this process (an ``EosApp``), and a read_committed reader
timing each output's arrival. One run per ``max_idle_s`` value, in turns, ``--reps``
turns; p50 / p99 / max per run, then the medians per value.

    python -m benchmarks join-latency --broker genuine --idle 0 0.1 0.5 --row-rate 0 5 50
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

import eosflow
from benchmarks._bench_broker import broker
from benchmarks._harness import create
from examples.customers import EnrichOrders

CUSTOMERS = 100


def joiner(table_topic: str, idle_s: float) -> eosflow.Processor:
    """``examples/customers.py``'s join with ``max_idle_s`` set on its table."""

    class Timed(EnrichOrders):
        def __init__(self) -> None:
            super().__init__()
            # over the table EnrichOrders declares in its __init__
            self.tables = {"customers": eosflow.Table(table_topic, max_idle_s=idle_s)}

    return Timed()


async def one_run(
    boot: str, idle_s: float, rate: float, row_rate: float, seconds: float
) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    orders, customers = f"orders-{run}", f"customers-{run}"
    await create(boot, (orders, 1), (customers, 1), (f"{orders}-enriched", 1))
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=0)
    await producer.start()
    reader = AIOKafkaConsumer(
        f"{orders}-enriched",
        bootstrap_servers=boot,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=10,
    )
    await reader.start()
    keys = [f"c{i}".encode() for i in range(CUSTOMERS)]
    for k in keys:
        await producer.send(customers, b'{"tier": 0}', key=k)
    await producer.flush()
    config = eosflow.EosConfig(
        bootstrap_servers=boot,
        group_id=f"g-{run}",
        input_topics=(orders,),
        transactional_id=f"t-{run}",
        state_dir=tempfile.mkdtemp(prefix="eosflow-join-latency-"),
    )
    lat: list[float] = []
    sent, all_in = 0, asyncio.Event()
    wanted: list[int] = []  # the number of orders, once all are sent
    try:
        async with eosflow.EosApp(joiner(customers, idle_s), config):
            await asyncio.sleep(3.0)  # joined, the table restored

            async def rows() -> None:
                n = 0
                while row_rate > 0:
                    await asyncio.sleep(1 / row_rate)
                    n += 1
                    row = json.dumps({"tier": n}).encode()
                    await producer.send(customers, row, key=keys[n % CUSTOMERS])

            async def read() -> None:
                while True:
                    for records in (await reader.getmany(timeout_ms=100)).values():
                        now = time.time()
                        lat.extend((now - json.loads(r.value)["sent"]) * 1000 for r in records)
                    if wanted and len(lat) >= wanted[0]:
                        all_in.set()

            updating, reading = asyncio.create_task(rows()), asyncio.create_task(read())
            began = time.monotonic()
            while time.monotonic() - began < seconds:
                body = json.dumps({"n": sent, "sent": time.time()}).encode()
                await producer.send(orders, body, key=keys[sent % CUSTOMERS])
                sent += 1
                await asyncio.sleep(max(0.0, began + sent / rate - time.monotonic()))
            updating.cancel()
            wanted.append(sent)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_in.wait(), 30)
            reading.cancel()
    finally:
        await reader.stop()
        await producer.stop()
    if len(lat) != sent:
        raise SystemExit(f"max_idle_s {idle_s}: {len(lat)} outputs of {sent} orders")
    lat.sort()
    return {
        "max_idle_s": idle_s,
        "row_rate": row_rate,
        "orders": sent,
        "p50_ms": lat[len(lat) // 2],
        "p99_ms": lat[int(len(lat) * 0.99)],
        "max_ms": lat[-1],
    }


async def main(args: argparse.Namespace) -> int:
    runs: list[dict[str, Any]] = []
    async with broker(args) as (boot, what, _version):
        print(f"broker: {what}; orders at {args.rate:g}/s, {args.seconds:g} s a run", flush=True)
        for row_rate in args.row_rate:
            for turn in range(args.reps):
                for idle_s in args.idle:
                    r = await one_run(boot, idle_s, args.rate, row_rate, args.seconds)
                    runs.append(r)
                    print(
                        f"rows {row_rate:g}/s, max_idle_s {idle_s:g}, turn {turn + 1}: "
                        f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                        f"max {r['max_ms']:.1f} ms ({r['orders']} orders)",
                        flush=True,
                    )
    print("\nmedians of the turns:")
    print("| table rows/s | max_idle_s | p50 ms | p99 ms | max ms |")
    print("|---:|---:|---:|---:|---:|")
    for row_rate in args.row_rate:
        for idle_s in args.idle:
            mine = [r for r in runs if r["row_rate"] == row_rate and r["max_idle_s"] == idle_s]
            p50 = statistics.median(r["p50_ms"] for r in mine)
            p99 = statistics.median(r["p99_ms"] for r in mine)
            top = statistics.median(r["max_ms"] for r in mine)
            print(f"| {row_rate:g} | {idle_s:g} | {p50:.1f} | {p99:.1f} | {top:.1f} |")
    if args.json:
        await asyncio.to_thread(Path(args.json).write_text, json.dumps(runs, indent=1))
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", default="fake", help="fake, or genuine[:version]")
    ap.add_argument("--idle", type=float, nargs="+", default=[0.0, 0.1, 0.5])
    ap.add_argument("--row-rate", type=float, nargs="+", default=[0.0, 5.0, 50.0])
    ap.add_argument("--rate", type=float, default=200.0, help="orders per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="of orders a run")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", help="write every run here")
    args = ap.parse_args(argv)
    args.broker_latency_ms, args.pin = 0.0, False  # the broker's options, unused here
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
