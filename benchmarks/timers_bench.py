"""``python -m benchmarks timers``: event-time timers at volume -- a million scheduled and
fired, and the restore of a million pending.

1. **Schedule and fire.** RECORDS orders with distinct keys, event times a millisecond
   apart, spread over the partitions; then one record per partition far enough in event
   time to make every timer due. The processor (``examples/order_timeout.py``'s shape)
   sets a timer ``--timeout-s`` after each order and emits ``expired`` when it fires:
   RECORDS timers set and fired, each in the transaction that deletes it. The clock: the
   first record processed to the group's offsets committed at the input's end. Checked
   afterwards: every order's key once in the output (read_committed), no other.
2. **Restore.** The same orders with timers an hour away (none fires): a first instance
   schedules them all, then a fresh instance (empty local copy) restores the ``timers``
   store -- two changelog records per timer -- and is timed from its start to every
   partition's stores ready.

Each instance runs in its own process (``--contender``), eosflow's default settings; one
JSON line each, like the other benchmarks. The broker: as ``python -m benchmarks run``
(``--broker fake`` or ``genuine[:version]``). Writes ``benchmarks/results/timers.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from benchmarks._bench_broker import broker
from benchmarks._contenders import peak_rss_mb
from benchmarks._harness import RESULTS, create, run_contender
from eosflow.testing import read_topic

TIMEOUT_S = 3600.0


async def seed(boot: str, topic: str, n: int, partitions: int, tick_ms: int | None) -> None:
    """``n`` orders ``o<i>``, a millisecond apart, round robin over the partitions; with
    ``tick_ms``, then a ``tick`` per partition that much past the last order."""
    print(f"  seeding {n:,} orders into {topic} ...", flush=True)
    started = time.monotonic()
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    base = int(time.time() // 60 * 60_000)
    try:
        futs = [
            await producer.send(
                topic, b"order", key=b"o%d" % i, partition=i % partitions, timestamp_ms=base + i
            )
            for i in range(n)
        ]
        if tick_ms is not None:
            for p in range(partitions):
                futs.append(
                    await producer.send(
                        topic, b"tick", key=b"tick", partition=p, timestamp_ms=base + n + tick_ms
                    )
                )
        await asyncio.gather(*futs)
    finally:
        await producer.stop()
    print(f"  seeded in {time.monotonic() - started:.1f} s", flush=True)


# --- one instance, in its own process -----------------------------------------------------


async def instance(
    role: str, boot: str, src: str, dst: str, n: int, group: str, state_dir: str, timeout_ms: int
) -> dict[str, Any]:
    """``fire``/``schedule``: process the ``n`` records (and ticks) to the last commit;
    ``restore``: a fresh instance, until every assigned partition's stores are ready."""
    import logging

    import eosflow

    first: list[float] = []
    ready: set[str] = set()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if msg.startswith("stores of ") and msg.endswith(" ready"):
                ready.add(msg)

    logging.getLogger("eosflow.session").addHandler(Watch())
    logging.getLogger("eosflow.session").setLevel(logging.INFO)

    class Orders(eosflow.Processor):
        async def process(self, record: eosflow.Record) -> None:
            if role == "restore":
                raise AssertionError("the input is all consumed: nothing to process")
            if not first:
                first.append(time.monotonic())
            if record.value == b"order":
                self.timers.at(record.timestamp + timeout_ms, record.key or b"")

        async def fire(self, timer: eosflow.Timer) -> eosflow.Output:
            return eosflow.Output(dst, b"expired", key=timer.key)

    txn = group if role != "restore" else f"{group}-restore"
    cfg = eosflow.EosConfig(
        bootstrap_servers=boot,
        group_id=group,
        input_topics=(src,),
        transactional_id=txn,
        state_dir=state_dir,
    )
    started = time.monotonic()
    app = eosflow.EosApp(Orders(), cfg)
    out: dict[str, Any] = {}
    async with app:
        if role == "restore":
            while not (app.assigned and len(ready) >= len(app.assigned)):
                if app.failure is not None:
                    raise app.failure
                await asyncio.sleep(0.005)
            out["seconds"] = time.monotonic() - started
        else:
            while not (app.stats.records >= n and not app.in_transaction):
                if app.failure is not None:
                    raise app.failure
                if "rss_tenth_mb" not in out and app.stats.records >= n // 10:
                    out["rss_tenth_mb"] = peak_rss_mb("VmRSS")
                await asyncio.sleep(0.005)
            out["seconds"] = time.monotonic() - first[0]
    return out


def contender(argv: list[str]) -> None:
    role, boot, src, dst, n, group, state_dir, timeout_ms = argv
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    r = asyncio.run(instance(role, boot, src, dst, int(n), group, state_dir, int(timeout_ms)))
    print(json.dumps({"contender": role, **r, "rss_peak_mb": peak_rss_mb()}), flush=True)


# --- the run --------------------------------------------------------------------------------


async def one(
    role: str, boot: str, src: str, dst: str, n: int, group: str, state: str, timeout_ms: int
) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.timers_bench", "--contender", role]
    cmd += [boot, src, dst, str(n), group, state, str(timeout_ms)]
    return await run_contender(role, cmd, n, timeout_s=3600)


async def main(args: argparse.Namespace) -> int:
    RESULTS.mkdir(exist_ok=True)
    tag, n, parts = uuid.uuid4().hex[:6], args.records, args.partitions
    out: dict[str, Any] = {"args": vars(args)}
    ok = True
    state = tempfile.mkdtemp(prefix="eosflow-timers-")
    try:
        async with broker(args) as (boot, described, _version):
            out["broker"] = described
            print(f"broker: {described}", flush=True)
            timeout_ms = round(args.timeout_s * 1000)
            src, dst, group = f"tm-in-{tag}", f"tm-out-{tag}", f"tm-g-{tag}"
            await create(boot, (src, parts), (dst, parts))
            await seed(boot, src, n, parts, tick_ms=timeout_ms + 1)
            r = await one("fire", boot, src, dst, n + parts, group, f"{state}/a", timeout_ms)
            r["rate"] = n / r["seconds"]
            got = Counter(k for _p, _o, k, _v in await read_topic(boot, dst))
            want = {b"o%d" % i for i in range(n)}
            r["check"] = (
                "ok"
                if set(got) == want and max(got.values()) == 1
                else f"{len(want - set(got))} orders never expired, "
                f"{sum(1 for c in got.values() if c > 1)} expired twice"
            )
            ok &= r["check"] == "ok"
            out["fire"] = r
            print(
                f"  {n:,} timers set and fired: {r['rate']:,.0f} /s ({r['seconds']:.1f} s), "
                f"peak RSS {r['rss_peak_mb']:.0f} MiB, check {r['check']}",
                flush=True,
            )
            src, dst, group = f"tm-big-{tag}", f"tm-big-out-{tag}", f"tm-big-g-{tag}"
            await create(boot, (src, parts), (dst, parts))
            await seed(boot, src, n, parts, tick_ms=None)
            far = round(TIMEOUT_S * 1000)
            s = await one("schedule", boot, src, dst, n, group, f"{state}/b", far)
            print(f"  {n:,} timers scheduled, none due, in {s['seconds']:.1f} s", flush=True)
            res = await one("restore", boot, src, dst, n, group, f"{state}/c", far)
            out["schedule"], out["restore"] = s, res
            print(
                f"  restore of {n:,} pending timers ({2 * n:,} changelog records): "
                f"{res['seconds']:.1f} s, peak RSS {res['rss_peak_mb']:.0f} MiB",
                flush=True,
            )
    finally:
        shutil.rmtree(state, ignore_errors=True)
    (RESULTS / "timers.json").write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks timers", description=__doc__)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument(
        "--timeout-s", type=float, default=60.0, help="an order's timer, after its event time"
    )
    p.add_argument("--broker", default="fake", help="fake, or genuine[:version]")
    p.add_argument("--broker-latency-ms", type=float, default=0.0)
    p.add_argument("--pin", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--contender":
        contender(sys.argv[2:])
    else:
        sys.exit(asyncio.run(main(parse())))
