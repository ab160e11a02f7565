"""``eosflow demo``: exactly-once under a crash, end to end, on one machine.

Starts the embedded test cluster, seeds an ``orders`` topic, runs several ``eosflow run``
instances of ``Enrich`` as separate processes, SIGKILLs one of them midway and restarts
it, shows progress, stops the rest with SIGTERM, and checks that every order appears in
``orders-enriched`` exactly once and the group's committed offsets reached the end.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Mapping

from aiokafka import AIOKafkaProducer

from ._processor import Processor
from ._records import Output, Record
from .testing import (
    ClusterSettings,
    FakeCluster,
    GroupSettings,
    TxnSettings,
    check_exactly_once,
    spawn_run,
)

IN, OUT, GROUP = "orders", "orders-enriched", "demo-enrich"


class Enrich(Processor):
    """Adds a price band and the amount with tax to each JSON order; keeps the key."""

    async def process(self, record: Record) -> Output:
        order = json.loads(record.value or b"{}")
        amount = float(order["amount"])
        order["band"] = "large" if amount >= 500 else "small"
        order["amount_with_tax"] = round(amount * 1.2, 2)
        return Output(OUT, json.dumps(order).encode(), key=record.key)


async def run_demo(records: int, instances: int, spark: bool = False) -> bool:
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    logging.getLogger("eosflow.testing").setLevel(logging.WARNING)
    settings = ClusterSettings(
        groups=GroupSettings(min_session_timeout_s=1.0), txns=TxnSettings(sweep_interval_s=1.0)
    )
    async with FakeCluster(settings) as cluster:
        cluster.create_topic(IN, 6)
        cluster.create_topic(OUT, 3)
        print(
            f"test cluster on {cluster.bootstrap_servers}; seeding {records} orders ...", flush=True
        )
        await _seed(cluster.bootstrap_servers, records)
        procs = [await _spawn(cluster.bootstrap_servers, i, spark) for i in range(instances)]
        killed = restarted = False
        started = last_print = time.monotonic()
        shown = -1
        try:
            while (done := _committed(cluster)) < records:
                elapsed = time.monotonic() - started
                since = time.monotonic() - last_print
                if (since >= 0.5 and done != shown) or since >= 3.0:  # progress, or a heartbeat
                    last_print, shown = time.monotonic(), done
                    alive = sum(p.returncode is None for p in procs)
                    print(
                        f"  [{elapsed:5.1f} s] committed {done:>7}/{records} "
                        f"({done / max(elapsed, 1e-9):7.0f} rec/s), {alive} instance(s) up",
                        flush=True,
                    )
                if not killed and done >= records * 0.25:
                    print("  >> SIGKILL instance 0 (mid-transaction, no cleanup)", flush=True)
                    procs[0].send_signal(signal.SIGKILL)
                    await procs[0].wait()
                    killed = True
                elif killed and not restarted:
                    print("  >> restarting instance 0 with the same transactional id", flush=True)
                    procs[0] = await _spawn(cluster.bootstrap_servers, 0, spark)
                    restarted = True
                if any(p.returncode not in (None, -signal.SIGKILL) for p in procs):
                    print("an instance exited unexpectedly", flush=True)
                    return False
                if elapsed > 600:
                    print("gave up after 600 s", flush=True)
                    return False
                await asyncio.sleep(0.1)
            print(
                f"all {records} orders committed in {time.monotonic() - started:.1f} s; "
                "stopping instances with SIGTERM",
                flush=True,
            )
        finally:
            for p in procs:
                if p.returncode is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                await p.wait()
        report = await check_exactly_once(
            cluster.bootstrap_servers, IN, OUT, match="key", group_id=GROUP
        )
        print(report.summary(), flush=True)
        return report.ok


async def _seed(bootstrap: str, n: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futs = []
        for i in range(n):
            order = {"id": i, "customer": f"c{i % 97}", "amount": (i * 37) % 1000}
            futs.append(
                await producer.send(IN, json.dumps(order).encode(), key=f"order-{i}".encode())
            )
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


async def _spawn(bootstrap: str, index: int, spark: bool) -> asyncio.subprocess.Process:
    env = instance_env(spark, os.environ)
    return await spawn_run(
        "eosflow._demo_spark:SparkEnrich" if spark else "eosflow._demo:Enrich",
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        input_topics=(IN,),
        transactional_id=f"demo-enrich-{index}",
        env=env,
    )


def instance_env(spark: bool, environ: Mapping[str, str]) -> dict[str, str]:
    """The settings a demo instance runs with, beside its bootstrap, group and ids."""
    env = {
        "EOSFLOW_SESSION_TIMEOUT_S": "3",
        "EOSFLOW_HEARTBEAT_INTERVAL_S": "0.3",
        "EOSFLOW_TRANSACTION_TIMEOUT_S": "2.5",
    }
    if spark:  # one Spark job per transaction: fewer, larger transactions
        env.update(
            EOSFLOW_SESSION_TIMEOUT_S="10",
            EOSFLOW_TRANSACTION_TIMEOUT_S="8",
            EOSFLOW_COMMIT_INTERVAL_S="1",
            EOSFLOW_MAX_RECORDS_PER_TXN="20000",
        )
        # where Spark runs is the user's choice: a cluster (EOSFLOW_SPARK_MASTER) or a
        # Connect server (EOSFLOW_SPARK_REMOTE) reaches the demo's instances
        env.update({k: v for k, v in environ.items() if k.startswith("EOSFLOW_SPARK_")})
    return env


def _committed(cluster: FakeCluster) -> int:
    return sum(cluster.committed(GROUP, IN).values())
