"""``eosflow demo``: exactly-once under a crash, end to end, on one machine.

Starts the embedded test cluster, seeds an ``orders`` topic, runs several ``eosflow run``
instances of ``Enrich`` as separate processes, SIGKILLs one of them midway and restarts
it, shows progress, stops the rest with SIGTERM, and checks that every order appears in
``orders-enriched`` exactly once and the group's committed offsets reached the end.

``--stateful`` runs the counting pipeline under the same crash instead: orders keyed by
customer, ``CountOrders`` keeping a running count per customer in a store, and the check
of the final counts against the ground truth (``eosflow.testing.check_counts``): every
customer's count equals its orders, and its outputs are exactly 1, 2, ..., n.

``--windows`` runs the windowed pipeline under it: orders keyed by customer, 10 ms of
event time apart, ``OrdersPerMinute`` counting each customer's orders per minute of
event time and emitting each minute's final count once, when the minute closes; checked
against the finals the input alone gives (``eosflow.testing.check_windows``).

``--join`` runs the join under it: a ``customers`` table (each customer's row updated
every 100 ms of event time, all of it written first) and the orders keyed by customer,
``OrdersWithCustomers`` adding to each order its customer's row as of the order's time;
checked against the rows the two topics alone give (``eosflow.testing.expected_join``):
every order once, each with the row of its time.

``--typed`` runs the orders in Avro through a genuine schema registry under it
(``_typed``): validated into a model, one bad order dead-lettered; checked through the
registry: every good order once, the bad one alone in the dead-letter topic.

``--regroup`` runs a pipeline of two stages under it (``_regroup``): the orders keyed by
customer regrouped by product, then counted per product per minute of event time;
checked per product and minute: one final, its count plus the minute's late orders the
input's.

``--sink postgres`` runs the orders into a PostgreSQL table under it (``_sink``): a
``PostgresSink`` naming the table, the test kit's PostgreSQL started for the demo;
checked in the database: every order one row.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from aiokafka import AIOKafkaProducer

from .._processor import Processor
from .._records import Output, Record
from .._state import JSON, Table, Tumbling
from ..testing import (
    ClusterSettings,
    FakeCluster,
    GroupSettings,
    TxnSettings,
    check_counts,
    check_exactly_once,
    check_windows,
    expected_join,
    read_topic,
    spawn_run,
)
from . import _regroup

IN, OUT, GROUP = "orders", "orders-enriched", "demo-enrich"
COUNT_OUT, COUNT_GROUP, CUSTOMERS = "orders-per-customer", "demo-count", 97
MINUTE_OUT, MINUTE_GROUP, EVENT_EVERY_MS = "orders-per-minute", "demo-windows", 10
MINUTE = Tumbling(size_s=60, grace_s=5)
JOIN_OUT, JOIN_GROUP, TABLE, ROW_EVERY_MS = "orders-with-customers", "demo-join", "customers", 100
# event times start at this day's first ms (UTC), not at 1970's ms 0: a broker deletes a
# log whose records are all older than its retention.ms (7 days) at its next retention
# check -- the test cluster's comes every second, a genuine one's every 5 minutes
T0_MS = int(time.time() // 86_400) * 86_400_000


_Encode = Callable[[dict[str, Any]], bytes]


@dataclass(frozen=True)
class _Pipeline:
    """What one demo runs: its group, output, processor and how orders are keyed."""

    group: str
    out: str
    target: str
    by_customer: bool
    timed: bool = False  # orders carry event times, EVENT_EVERY_MS apart
    paced: bool = False  # orders produced while the instances run (``_regroup``)


ENRICH = _Pipeline(GROUP, OUT, "eosflow._demo:Enrich", by_customer=False)
SPARK = _Pipeline(GROUP, OUT, "eosflow._demo._spark:SparkEnrich", by_customer=False)
COUNT = _Pipeline(COUNT_GROUP, COUNT_OUT, "eosflow._demo:CountOrders", by_customer=True)
WINDOWS = _Pipeline(
    MINUTE_GROUP, MINUTE_OUT, "eosflow._demo:OrdersPerMinute", by_customer=True, timed=True
)
JOIN = _Pipeline(
    JOIN_GROUP, JOIN_OUT, "eosflow._demo:OrdersWithCustomers", by_customer=True, timed=True
)
SINK = _Pipeline("demo-sink", "", "eosflow._demo:OrdersIntoPostgres", by_customer=False)
TYPED = _Pipeline(
    "demo-typed", "orders-enriched-typed", "eosflow._demo._typed:TypedEnrich", by_customer=False
)
REGROUP = _Pipeline(
    _regroup.GROUP,
    _regroup.OUT,
    "eosflow._demo._regroup:OrdersPerProduct",
    by_customer=True,
    timed=True,
    paced=True,
)
_NAMES = {
    ENRICH.target: "enrichment",
    SPARK.target: "Spark enrichment",
    COUNT.target: "count per customer (state)",
    WINDOWS.target: "orders per minute (windows)",
    JOIN.target: "orders with their customers (join)",
    SINK.target: "orders into PostgreSQL (sink)",
    TYPED.target: "typed orders in Avro through a schema registry",
    REGROUP.target: "orders per product per minute (regroup)",
}


class Enrich(Processor):
    """Adds a price band and the amount with tax to each JSON order; keeps the key."""

    async def process(self, record: Record) -> Output:
        order = json.loads(record.value or b"{}")
        amount = float(order["amount"])
        order["band"] = "large" if amount >= 500 else "small"
        order["amount_with_tax"] = round(amount * 1.2, 2)
        return Output(OUT, json.dumps(order).encode(), key=record.key)


class CountOrders(Processor):
    """A running count of orders per customer (the order's key), emitted on every order."""

    stores = {"orders": JSON}

    async def process(self, record: Record) -> Output:
        counts = self.state("orders")
        n = counts.get(record.key or b"", 0) + 1
        counts.put(record.key or b"", n)
        return Output(COUNT_OUT, str(n).encode(), key=record.key)


class OrdersPerMinute(_regroup.MinuteCounts):
    """Orders per customer per minute of event time, each minute's count emitted once,
    when it closes (5 s of grace)."""

    def __init__(self) -> None:
        super().__init__(MINUTE, MINUTE_OUT)


class OrdersWithCustomers(Processor):
    """Each order with its customer's row as of the order's time, and where it was read
    (the check finds the order by its partition and offset)."""

    tables = {"customers": Table(TABLE)}

    async def process(self, record: Record) -> Output:
        order = json.loads(record.value or b"{}")
        order["customer_row"] = self.table("customers").get(record.key or b"")
        order["at"] = [record.partition, record.offset]
        return Output(JOIN_OUT, json.dumps(order), key=record.key)


async def run_demo(
    records: int,
    instances: int,
    spark: bool = False,
    stateful: bool = False,
    windows: bool = False,
    join: bool = False,
    sink: bool = False,
    typed: bool = False,
    regroup: bool = False,
) -> bool:
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # the story is eosflow's
    logging.getLogger("eosflow.testing").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per registry request
    settings = cluster_settings(spark)
    pipeline = (
        REGROUP
        if regroup
        else TYPED
        if typed
        else SINK
        if sink
        else JOIN
        if join
        else WINDOWS
        if windows
        else COUNT
        if stateful
        else SPARK
        if spark
        else ENRICH
    )
    state_dir = tempfile.mkdtemp(prefix="eosflow-demo-state-")
    try:
        async with FakeCluster(settings) as cluster:
            if pipeline is TYPED:
                ok = await _run_typed(cluster, records, instances, state_dir)
            elif pipeline is REGROUP:
                cluster.create_topic(_regroup.LATE, 1)
                env = {"EOSFLOW_DEAD_LETTER_TOPIC": _regroup.LATE}
                ok = await _run(cluster, pipeline, records, instances, False, state_dir, env)
            elif pipeline is not SINK:
                ok = await _run(cluster, pipeline, records, instances, spark, state_dir)
            else:
                from .._servers import Postgres
                from . import _sink

                async with Postgres() as pg:
                    print(f"PostgreSQL on 127.0.0.1:{pg.port} (the test kit's)", flush=True)
                    await _sink.make_table(pg.dsn)
                    env = {"EOSFLOW_POSTGRES_DSN": pg.dsn}
                    ran = await _run(cluster, pipeline, records, instances, spark, state_dir, env)
                    ok = ran and await _sink.check_rows(pg.dsn, records)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    print(verdict(ok, pipeline, records, instances), flush=True)
    return ok


async def _run_typed(cluster: FakeCluster, records: int, instances: int, state_dir: str) -> bool:
    """The typed demo (``_typed``): the test kit's schema registry beside the cluster."""
    from ..testing import SchemaRegistry
    from . import _typed

    registry = SchemaRegistry()
    print("starting the test kit's schema registry (built once with Maven) ...", flush=True)
    try:
        await registry.start()
    except Exception as exc:  # no Java or Maven, or a build that failed: said in one line
        print(f"the typed demo needs the test kit's schema registry: {exc}", flush=True)
        return False
    try:
        print(f"schema registry on {registry.url} (Apicurio, the test kit's)", flush=True)
        client, orders, enriched = await _typed.codecs(registry.url)
        try:
            cluster.create_topic(_typed.DLQ, 1)
            env = {
                "EOSFLOW_SCHEMA_REGISTRY_URL": registry.url,
                "EOSFLOW_DEAD_LETTER_TOPIC": _typed.DLQ,
            }
            encode = _typed.encoder(orders)
            ran = await _run(cluster, TYPED, records, instances, False, state_dir, env, encode)
            return ran and await _typed.check(cluster.bootstrap_servers, enriched, records)
        finally:
            await client.close()
    finally:
        await registry.stop()


def verdict(ok: bool, pipeline: _Pipeline, records: int, instances: int) -> str:
    """Every demo's last line, in one form: ``EXACTLY ONCE: OK -- ...`` or ``FAILED``."""
    what = _NAMES[pipeline.target]
    if not ok:
        return f"EXACTLY ONCE: FAILED -- the {what} demo: see the check above"
    return (
        f"EXACTLY ONCE: OK -- the {what} demo: {records} orders through {instances} "
        "instances, one SIGKILLed mid-transaction and restarted"
    )


async def _run(
    cluster: FakeCluster,
    pipeline: _Pipeline,
    records: int,
    instances: int,
    spark: bool,
    state_dir: str,
    extra_env: Mapping[str, str] | None = None,
    encode: _Encode | None = None,
) -> bool:
    """The instances under the crash, then the check of their output (a sink's rows and
    the typed demo's outputs are checked by the caller: ``True`` here once every order
    is committed). ``encode``: an order's value (default: its JSON)."""
    cluster.create_topic(IN, 6)
    if pipeline.out:
        cluster.create_topic(pipeline.out, 3)
    if pipeline is JOIN:  # the table first, whole: the join then depends on the input alone
        cluster.create_topic(TABLE, 6)
        await _seed_customers(cluster.bootstrap_servers, records * EVENT_EVERY_MS)
    what = f"orders of {CUSTOMERS} customers" if pipeline.by_customer else "orders"
    print(
        f"test cluster on {cluster.bootstrap_servers}; seeding {records} {what} ...",
        flush=True,
    )
    # a quarter first; the rest is produced as instance 0 is killed, so the kill lands in
    # the middle of the work however fast the instances are
    # (the join: every order first -- orders written after the table was read to its end
    # would see rows from after their time, and the check asks for the rows of their time)
    quarter = max(1, records // 4)
    upfront = records if pipeline is JOIN else 0 if pipeline.paced else quarter
    if upfront:
        await _seed(cluster.bootstrap_servers, upfront, pipeline, encode=encode)
    env = instance_env(spark, os.environ) | {"EOSFLOW_STATE_DIR": state_dir}
    env |= extra_env or {}
    logs = tempfile.mkdtemp(prefix="eosflow-demo-logs-")

    async def spawn(i: int) -> asyncio.subprocess.Process:
        return await _spawn(cluster.bootstrap_servers, i, pipeline, env, logs)

    procs = [await spawn(i) for i in range(instances)]
    killed = restarted = False
    rest: asyncio.Task[None] | None = None
    if pipeline.paced:  # every order while the instances run, then the closing ones
        rest = asyncio.create_task(_seed(cluster.bootstrap_servers, records, pipeline))
    started = last_print = time.monotonic()
    shown = -1
    closing = 0 if not pipeline.paced else 6  # the closing orders, one per partition
    total, closed = records + closing, False
    try:
        while (done := _committed(cluster, pipeline.group)) < total:
            elapsed = time.monotonic() - started
            since = time.monotonic() - last_print
            if (since >= 0.5 and done != shown) or since >= 3.0:  # progress, or a heartbeat
                last_print, shown = time.monotonic(), done
                alive = sum(p.returncode is None for p in procs)
                print(
                    f"  [{elapsed:5.1f} s] committed {done:>7}/{total} "
                    f"({done / max(elapsed, 1e-9):7.0f} rec/s), {alive} instance(s) up",
                    flush=True,
                )
            if closing and not closed and done >= records:
                closed = True  # every order regrouped: nothing of them comes after these
                last_ms = T0_MS + (records - 1) * EVENT_EVERY_MS
                await _regroup.seed_closing(
                    cluster.bootstrap_servers, IN, records, last_ms, closing
                )
            if not killed and done >= quarter:
                if upfront < records and rest is None:
                    rest = asyncio.create_task(
                        _seed(
                            cluster.bootstrap_servers, records - upfront, pipeline, upfront, encode
                        )
                    )
                print("  >> SIGKILL instance 0 (mid-transaction, no cleanup)", flush=True)
                procs[0].send_signal(signal.SIGKILL)
                await procs[0].wait()
                killed = True
            elif killed and not restarted:
                print("  >> restarting instance 0 with the same transactional id", flush=True)
                procs[0] = await spawn(0)
                restarted = True
            if any(p.returncode not in (None, -signal.SIGKILL) for p in procs):
                print("an instance exited unexpectedly", flush=True)
                return False
            if elapsed > 600:
                print("gave up after 600 s", flush=True)
                return False
            await asyncio.sleep(0.1)
        if rest is not None:
            await rest  # long done: every order is committed
        if pipeline.paced:  # and counted: the last stage read every regrouped order
            await _regroup.drained(cluster.bootstrap_servers, pipeline.group)
        print(
            f"all {records} orders committed in {time.monotonic() - started:.1f} s; "
            "stopping instances with SIGTERM",
            flush=True,
        )
    finally:
        if rest is not None and not rest.done():
            rest.cancel()
        for p in procs:
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            await p.wait()
        await asyncio.gather(*_relays)  # their last lines, up to the processes' ends
        print(f"the instances' logs, aiokafka's lines included: {logs}", flush=True)
    bootstrap = cluster.bootstrap_servers
    if pipeline is SINK or pipeline is TYPED:
        return True  # its output is checked by the caller
    if pipeline is JOIN:
        return await _check_join(bootstrap, records)
    if pipeline is REGROUP:
        return await _regroup.check(bootstrap, T0_MS, EVENT_EVERY_MS, records)
    if pipeline.timed:
        finals = await check_windows(bootstrap, IN, pipeline.out, MINUTE)
        print(finals.summary(), flush=True)
        return finals.ok
    if pipeline.by_customer:
        changelog = f"{pipeline.group}--{IN}--orders--changelog"
        state = await check_counts(bootstrap, IN, pipeline.out, changelog, group_id=COUNT_GROUP)
        print(state.summary(), flush=True)
        return state.ok
    report = await check_exactly_once(bootstrap, IN, OUT, match="key", group_id=GROUP)
    print(report.summary(), flush=True)
    return report.ok


async def _seed(
    bootstrap: str, n: int, pipeline: _Pipeline, first: int = 0, encode: _Encode | None = None
) -> None:
    """Orders ``first`` to ``first + n - 1`` as JSON (or as ``encode`` writes them), keyed
    by order id, or by customer for the counting and windowed demos (the windowed one's
    ``EVENT_EVERY_MS`` apart in event time)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    t0 = time.monotonic()
    try:
        futs = []
        for i in range(first, first + n):
            customer = f"c{i % CUSTOMERS}"
            order = {"id": i, "customer": customer, "amount": (i * 37) % 1000}
            if pipeline.paced:  # produced as a live source would, with a product
                order["product"] = _regroup.product_of(i)
                if (ahead := (i - first) / _regroup.PACE_PER_S - (time.monotonic() - t0)) > 0:
                    await asyncio.sleep(ahead)
            key = customer if pipeline.by_customer else f"order-{i}"
            at = T0_MS + i * EVENT_EVERY_MS if pipeline.timed else None
            value = json.dumps(order).encode() if encode is None else encode(order)
            futs.append(await producer.send(IN, value, key=key.encode(), timestamp_ms=at))
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


async def _seed_customers(bootstrap: str, span_ms: int) -> None:
    """A row per customer every ``ROW_EVERY_MS`` (in turn) over the orders' event times."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futs = []
        for k in range(span_ms // ROW_EVERY_MS):
            customer, version = f"c{k % CUSTOMERS}", k // CUSTOMERS
            row = {"tier": ("gold", "silver", "bronze")[version % 3], "version": version}
            at = T0_MS + k * ROW_EVERY_MS + 5  # between two orders: never a tie
            value, key = json.dumps(row).encode(), customer.encode()
            futs.append(await producer.send(TABLE, value, key=key, timestamp_ms=at))
        await asyncio.gather(*futs)
    finally:
        await producer.stop()
    print(f"customers table: {len(futs)} rows", flush=True)


async def _check_join(bootstrap: str, records: int) -> bool:
    """Every order once in the output, with the row the two topics alone give it."""
    rows = await expected_join(bootstrap, IN, TABLE)
    seen: dict[tuple[int, int], Any] = {}
    twice = 0
    for _p, _o, _k, value in await read_topic(bootstrap, JOIN_OUT):
        order = json.loads(value or b"{}")
        at = (order["at"][0], order["at"][1])
        twice += at in seen
        seen[at] = order["customer_row"]
    wrong = sum(
        seen.get(at) != (None if row is None else json.loads(row)) for at, row in rows.items()
    )
    missing = len(rows.keys() - seen.keys())
    ok = not (twice or wrong or missing) and len(rows) == records
    verdict = "OK" if ok else f"FAILED ({twice} twice, {wrong} wrong rows, {missing} missing)"
    print(f"join: {len(seen)} orders, each once with its customer's row of its time: {verdict}")
    return ok


async def _spawn(
    bootstrap: str, index: int, pipeline: _Pipeline, env: Mapping[str, str], logs: str
) -> asyncio.subprocess.Process:
    """Instance ``index``, its output relayed (``relay``) into ``logs``."""
    proc = await spawn_run(
        pipeline.target,
        bootstrap_servers=bootstrap,
        group_id=pipeline.group,
        input_topics=(IN,),
        transactional_id=f"{pipeline.group}-{index}",
        env=env,
        capture=True,
        log_format="json",
    )
    log = _log_file(os.path.join(logs, f"instance-{index}.log"))
    assert proc.stdout is not None and proc.stderr is not None
    for stream in (proc.stdout, proc.stderr):
        _relays.add(task := asyncio.create_task(relay(stream, index, log)))
        task.add_done_callback(_relays.discard)
    return proc


def _log_file(path: str) -> TextIO:
    """An instance's log file, appended to (a restarted instance goes on in its
    predecessor's); closed when the demo's process ends."""
    return open(path, "a", encoding="utf-8")


_relays: set[asyncio.Task[None]] = set()  # held until done (the loop keeps weak refs)


# What Spark's JVM writes on its own: log4j lines ("25/12/02 10:00:01 WARN Utils: ..."),
# its banner about them, stage progress bars (carriage returns between), a JVM warning
_SPARK_NOISE = re.compile(
    r"\s*(?:\r|\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?:TRACE|DEBUG|INFO|WARN|ERROR|FATAL) "
    r"|\[Stage \d+|Setting default log level|To adjust logging level|Using Spark's default "
    r"|WARNING: (?:Using incubator modules|An illegal reflective|sun\.misc\.Unsafe))"
)


async def relay(stream: asyncio.StreamReader, index: int, log: TextIO) -> None:
    """An instance's output, every line of it written to its log file ``log``. Only
    eosflow's own log lines are shown, as ``[instance N] LEVEL message``, and any line
    that is not a log line (a crash's traceback): the demo tells eosflow's story, so the
    lines of the libraries under it (aiokafka's "Heartbeat failed ... rebalancing",
    an expected part of the story) stay in the file -- and so do Spark's own, which
    its JVM writes as plain text (log4j lines, progress bars: ``_SPARK_NOISE``)."""
    while True:
        try:
            line = (await stream.readline()).decode(errors="replace")
        except ValueError:  # a line past the stream's limit (64 KiB): asyncio dropped it
            line = "[a line over 64 KiB, dropped]\n"
        if not line:
            break
        log.write(line)
        log.flush()
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            if not _SPARK_NOISE.match(line):
                print(f"  [instance {index}] {line.rstrip()}", flush=True)
        elif str(entry.get("logger", "")).split(".")[0] == "eosflow":
            level, message = entry.get("level"), entry.get("message")
            print(f"  [instance {index}] {level} {message}", flush=True)


def cluster_settings(spark: bool) -> ClusterSettings:
    """The demo's test cluster. The consumer group protocol's session and heartbeat are
    the broker's: the same as the instances' own (classic) ones, so that a crashed
    instance's partitions move as soon under either protocol (at Kafka's 45 s the demo
    stalled that long after its SIGKILL)."""
    env = instance_env(spark, {})
    groups = GroupSettings(
        min_session_timeout_s=1.0,
        consumer_session_timeout_s=float(env["EOSFLOW_SESSION_TIMEOUT_S"]),
        consumer_heartbeat_interval_s=float(env["EOSFLOW_HEARTBEAT_INTERVAL_S"]),
    )
    return ClusterSettings(groups=groups, txns=TxnSettings(sweep_interval_s=1.0))


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


def _committed(cluster: FakeCluster, group: str) -> int:
    return sum(cluster.committed(group, IN).values())
