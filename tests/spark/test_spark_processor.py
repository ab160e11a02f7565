"""The Spark offload with a real local Spark session (no mocks of Spark)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from fleet import committed_total
from kit import app_config, create_topic, eventually
from spark_procs import Broken, Slow, TenSecondClicks, Total, TypedTotals
from stateful import clicks_at, produce_at, steady

import eosflow
from eosflow._demo import OUT, Enrich
from eosflow._demo._spark import SparkEnrich
from eosflow._state import Seat, seated
from eosflow.spark import SparkJobTimeout
from eosflow.testing import FakeCluster, check_exactly_once, check_windows, read_topic, spawn_run
from eosflow.testing._ladder import Broker

ROOT = Path(__file__).parents[2]


def orders(n: int) -> list[eosflow.Record]:
    return [
        eosflow.Record(
            "in",
            i % 3,
            i,
            f"o{i}".encode(),
            json.dumps({"id": i, "customer": f"c{i % 7}", "amount": (i * 37) % 1000}).encode(),
            (("h", b"v"),),
            1_700_000_000_000 + i,
        )
        for i in range(n)
    ]


SPARK: dict[str, object] = dict(
    transactional_id="spark-1",
    session_timeout_s=20.0,
    transaction_timeout_s=15.0,
    commit_interval_s=1.0,
    max_records_per_txn=20_000,
    ops={},  # the progress line as users get it
)


def cfg(c: FakeCluster | Broker, **kw: object) -> eosflow.EosConfig:
    return app_config(c, **(SPARK | kw))


async def seed(c: FakeCluster, n: int, partitions: int = 3) -> None:
    c.create_topic("in", partitions)
    c.create_topic("out", 2)
    c.create_topic(OUT, 2)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, linger_ms=5)
    await p.start()
    await asyncio.gather(
        *[
            await p.send("in", r.value, key=r.key, partition=r.partition % partitions)
            for r in orders(n)
        ]
    )
    await p.stop()


async def in_python(records: list[eosflow.Record]) -> dict[bytes | None, object]:
    """The demo's enrichment as a plain Python processor: the reference result."""
    return {o.key: json.loads(o.value or b"") for o in await Enrich().process_batch(records)}


async def test_spark_transform_equals_the_same_transform_in_python() -> None:
    records = orders(2000)
    proc = SparkEnrich()
    await proc.on_start()
    try:
        outputs = await proc.process_batch(records)
    finally:
        await proc.on_stop()
    got = {o.key: json.loads(o.value or b"") for o in outputs}
    assert len(outputs) == len(records)
    assert got == await in_python(records)
    assert all(o.topic == OUT for o in outputs)


async def seed_broker(b: Broker, n: int, partitions: int, out: str) -> str:
    """A fresh input topic of ``n`` orders and an empty output topic on any broker."""
    src = b.unique("orders")
    await create_topic(b.bootstrap_servers, src, partitions)
    await create_topic(b.bootstrap_servers, out, 2)
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, linger_ms=5)
    await p.start()
    try:
        futs = [
            await p.send(src, r.value, key=r.key, partition=r.partition % partitions)
            for r in orders(n)
        ]
        await asyncio.gather(*futs)
    finally:
        await p.stop()
    return src


# On any broker of the ladder (genuine Kafka included).
async def test_spark_pipeline_is_exactly_once_end_to_end(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    out, group = b.unique("enriched"), b.unique("g")
    src = await seed_broker(b, 5000, 3, out)
    proc = SparkEnrich()
    proc.output_topic = out
    config = cfg_on(b, src, group, b.unique("spark"))
    app = eosflow.EosApp(proc, config)
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return await committed_total(b.bootstrap_servers, src, 3, group) == 5000

        await eventually(done, timeout_s=120, what="all orders committed")
    report = await check_exactly_once(b.bootstrap_servers, src, out, group_id=group)
    assert report.ok, report.summary()
    got = {k: json.loads(v or b"") for _, _, k, v in await read_topic(b.bootstrap_servers, out)}
    assert got == await in_python(orders(5000))
    assert app.stats.committed < 5000 / 100, "transactions are large on the Spark path"


def cfg_on(b: Broker, src: str, group: str, txn_id: str, **kw: object) -> eosflow.EosConfig:
    return cfg(b, input_topics=(src,), group_id=group, transactional_id=txn_id, **kw)


async def test_failing_spark_job_aborts_with_sparks_message(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    await seed(c, 50)
    app = eosflow.EosApp(Broken(), cfg(c))
    with pytest.raises(eosflow.ProcessingError) as info:
        async with app:

            async def stopped() -> bool:
                return app.failure is not None

            await eventually(stopped, timeout_s=120, what="the app stopped on the failure")
    message = str(info.value)
    assert "ValueError: bad value" in message, message
    assert "org.apache" not in message, "Spark's message, not a JVM stack"
    assert c.committed("g") == {}, "nothing committed past the failure"
    assert await read_topic(c.bootstrap_servers, "out") == []


async def test_heartbeats_continue_during_a_long_spark_job(
    eosflow_cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW_UDF_S", "0.5")
    c = eosflow_cluster
    await seed(c, 8, partitions=1)
    # 8 rows x 0.5 s on one Spark partition: a 4 s job against a 1.5 s session timeout
    app = eosflow.EosApp(
        Slow(),
        cfg(
            c,
            session_timeout_s=1.5,
            heartbeat_interval_s=0.2,
            transaction_timeout_s=10.0,
            allow_transaction_timeout_over_session=True,
            group_protocol="classic",  # its session is the client's (1.5 s here)
        ),
    )
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return sum(c.committed("g").values()) == 8

        await eventually(done, timeout_s=120, what="the slow batch committed")
        g = c.groups.get("g")  # before the app leaves (leaving starts a new generation)
        assert g is not None and g.generation == 1, "the member was never expelled"
    assert app.stats.aborted == 0
    assert app.processor.last_job_s >= 1.5  # type: ignore[attr-defined]


async def test_job_outliving_its_budget_is_aborted_and_retried_smaller(
    eosflow_cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW_UDF_S", "0.4")
    c = eosflow_cluster
    await seed(c, 8, partitions=1)
    proc = Slow()
    proc._job_timeout_s = 1.5  # 8 rows x 0.4 s = 3.2 s: too long; 2 rows fit
    proc.configure = lambda config: None  # type: ignore[method-assign]
    app = eosflow.EosApp(proc, cfg(c))
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return sum(c.committed("g").values()) == 8

        await eventually(done, timeout_s=180, what="all committed after retries")
    assert app.stats.aborted >= 1
    report = await check_exactly_once(c.bootstrap_servers, "in", "out", group_id="g")
    assert report.ok, report.summary()


# Fails when the cancel does not reach the job (SparkSession.interruptTag in classic
# mode, whose tags are thread-local: it finds nothing and the job runs to its end).
async def test_job_past_its_budget_is_cancelled_and_its_rows_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = tmp_path / "rows"
    monkeypatch.setenv("SLOW_UDF_S", "0.25")
    monkeypatch.setenv("SLOW_ROWS", str(rows))
    proc = Slow()
    jobs: list[eosflow.SparkJobReport] = []

    class Jobs(eosflow.Observer):  # what the app's metrics and tracing are told
        def spark_job(self, report: eosflow.SparkJobReport) -> None:
            jobs.append(report)

    await proc.on_start()
    proc._job_timeout_s = 1.5  # one Spark partition: 20 rows x 0.25 s = a 5 s job
    try:
        started = time.monotonic()
        with pytest.raises(SparkJobTimeout), seated(Seat(proc, Jobs())):  # as EosApp.run
            await proc.process_batch(orders(20))
        # watch past the time an uncancelled job would have written its last row
        await asyncio.sleep(max(0.0, started + 7.0 - time.monotonic()))
    finally:
        await proc.on_stop()
    done = rows.read_text().splitlines() if rows.exists() else []
    assert 0 < len(done) < 20, f"{len(done)} of 20 rows done: the job was not cancelled"
    assert proc.cancelled_jobs == 1
    assert [(j.rows, j.cancelled) for j in jobs] == [(20, True)]
    assert 1.5 <= jobs[0].duration_s < 7.0


async def test_sigkill_during_a_spark_job_then_restart_is_exactly_once(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    out, group = b.unique("out"), b.unique("g")
    src = await seed_broker(b, 40, 1, out)
    mark = tmp_path / "job-running"
    env = {
        "PYTHONPATH": f"{ROOT}:{ROOT / 'tests' / 'procs'}",
        "SLOW_UDF_S": "0.2",
        "SLOW_MARK": str(mark),
        "SLOW_OUT": out,
        "EOSFLOW_SESSION_TIMEOUT_S": "3",
        "EOSFLOW_HEARTBEAT_INTERVAL_S": "0.3",
        "EOSFLOW_TRANSACTION_TIMEOUT_S": "20",
        "EOSFLOW_ALLOW_TRANSACTION_TIMEOUT_OVER_SESSION": "true",
        "EOSFLOW_COMMIT_INTERVAL_S": "1",
        "EOSFLOW_MAX_RECORDS_PER_TXN": "20",
        # the Spark tests' mode (a cluster, Connect) reaches the child as a user's would
        **{k: v for k, v in os.environ.items() if k.startswith("EOSFLOW_SPARK_")},
    }
    txn_id = b.unique("sk")

    async def start() -> asyncio.subprocess.Process:
        return await spawn_run(
            "spark_procs:Slow",
            bootstrap_servers=b.bootstrap_servers,
            group_id=group,
            input_topics=(src,),
            transactional_id=txn_id,
            env=env,
        )

    proc = await start()

    # the first transaction holds 20 records: a ~4 s job; kill it while it runs
    async def in_job() -> bool:
        return mark.exists()

    try:
        await eventually(in_job, timeout_s=120, what="the first Spark job running")
        assert await committed_total(b.bootstrap_servers, src, 1, group) == 0
    finally:  # a failure here must not leave the instance (and its Spark JVM) running
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    proc = await start()

    async def done() -> bool:
        return await committed_total(b.bootstrap_servers, src, 1, group) == 40

    try:
        await eventually(done, timeout_s=180, what="restarted instance finished")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:  # SIGTERM is not honoured while on_start blocks
            proc.kill()
            await proc.wait()
            raise
    report = await check_exactly_once(b.bootstrap_servers, src, out, group_id=group)
    assert report.ok, report.summary()


# Windows kept by Spark under SIGKILL (spark_procs.TenSecondClicks: examples/
# spark_clicks.py with 10 s windows): the instance is killed while a job runs after
# transactions committed, and restarts with its local state wiped, so the windows come
# back from their changelogs alone. The finals read back read_committed equal those the
# input gives: every window's count once, none lost to the kill, none counted twice.
async def test_spark_windows_survive_a_sigkill_and_wiped_state(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    src, out, group = b.unique("clicks"), b.unique("finals"), b.unique("g")
    await create_topic(b.bootstrap_servers, src, 2)
    await create_topic(b.bootstrap_servers, out, 1)
    times = steady(0, 150, 0.5)  # after kit.T0_MS, this day's start (produce_at)
    events = clicks_at(0, times) + clicks_at(1, [t - 40 for t in times])
    await produce_at(b.bootstrap_servers, src, events, b"c")
    mark = tmp_path / "job-running"
    env = {
        "PYTHONPATH": f"{ROOT}:{ROOT / 'tests' / 'procs'}",
        "SLOW_MARK": str(mark),
        "SLOW_AGGREGATE_S": "0.5",
        "EOSFLOW_APP_OUTPUT": out,
        "EOSFLOW_SESSION_TIMEOUT_S": "6",
        "EOSFLOW_HEARTBEAT_INTERVAL_S": "0.5",
        "EOSFLOW_TRANSACTION_TIMEOUT_S": "20",
        "EOSFLOW_ALLOW_TRANSACTION_TIMEOUT_OVER_SESSION": "true",
        "EOSFLOW_COMMIT_INTERVAL_S": "0.5",
        "EOSFLOW_MAX_RECORDS_PER_TXN": "60",
        **{k: v for k, v in os.environ.items() if k.startswith("EOSFLOW_SPARK_")},
    }
    txn_id = b.unique("sc")

    async def start(state: str) -> asyncio.subprocess.Process:
        return await spawn_run(
            "spark_procs:TenSecondClicks",
            bootstrap_servers=b.bootstrap_servers,
            group_id=group,
            input_topics=(src,),
            transactional_id=txn_id,
            env=env | {"EOSFLOW_STATE_DIR": str(tmp_path / state)},
        )

    async def committed() -> int:
        return await committed_total(b.bootstrap_servers, src, 2, group)

    proc = await start("first")
    try:

        async def some_committed() -> bool:
            return await committed() >= 180

        await eventually(some_committed, timeout_s=180, what="transactions committed")
        mark.unlink(missing_ok=True)

        async def in_job() -> bool:
            return mark.exists()

        await eventually(in_job, timeout_s=60, what="a Spark job running")
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert await committed() < len(events), "killed before the input's end"
    proc = await start("wiped")  # an empty local copy: restored from the changelogs

    async def done() -> bool:
        assert proc.returncode is None, f"the restarted instance exited ({proc.returncode})"
        return await committed() == len(events)

    try:
        await eventually(done, timeout_s=180, what="restarted instance finished")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
    spec = TenSecondClicks().windows["clicks"]  # declared in its __init__, from its settings
    report = await check_windows(b.bootstrap_servers, src, out, spec)
    assert report.ok, report.summary()
    assert report.expected > 0


def test_import_without_pyspark_gives_an_install_hint() -> None:
    """Without PySpark, ``eosflow.spark`` imports (its ``SparkSettings`` needs pydantic
    alone: the settings reference builds from the docs extra), and the first import of a
    name that needs Spark stops with the install hint."""
    settings = "import sys; sys.modules['pyspark'] = None; from eosflow.spark import SparkSettings"
    run = subprocess.run([sys.executable, "-c", settings], capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
    code = "import sys; sys.modules['pyspark'] = None; from eosflow.spark import SparkProcessor"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "pip install 'eosflow[spark]'" in run.stderr.splitlines()[-1]


# Typed frames: a SparkProcessor over a model's topic gets its fields as columns and
# returns rows of its output's model; a record that does not decode is dead-lettered on
# its own, as written, and the rest of its batch goes on. Caught: the frame built from
# the records as read (no `id` column: every job fails, its batch dead-lettered).
async def test_a_typed_spark_processor_gets_the_models_fields_as_columns(
    eosflow_cluster: FakeCluster,
) -> None:
    c = eosflow_cluster
    for topic, parts in (("in", 3), ("totals", 1), ("dlq", 1)):
        c.create_topic(topic, parts)
    records = orders(300)
    bad = {7, 150}  # an amount that is not a number
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, linger_ms=5)
    await p.start()
    try:
        for r in records:
            value = b'{"id": 1, "customer": "c1", "amount": "lots"}' if r.offset in bad else r.value
            await p.send(r.topic, value, key=r.key, partition=r.partition)
        await p.flush()
    finally:
        await p.stop()
    app = eosflow.EosApp(TypedTotals(), cfg(c, dead_letter_topic="dlq"))
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return sum(c.committed("g", "in").values()) == 300

        await eventually(done, timeout_s=120, what="all orders committed")
    want: dict[str, list[int]] = {}
    for r in records:
        if r.offset not in bad:
            o = json.loads(r.value or b"")
            n, amount = want.setdefault(o["customer"], [0, 0])
            want[o["customer"]] = [n + 1, amount + o["amount"]]
    got: dict[str, list[int]] = {}
    for _p, _o, key, value in await read_topic(c.bootstrap_servers, "totals"):
        t = Total.model_validate_json(value or b"")
        assert key == t.customer.encode()
        n, amount = got.setdefault(t.customer, [0, 0])
        got[t.customer] = [n + t.orders, amount + t.amount]
    assert got == want
    dead = await read_topic(c.bootstrap_servers, "dlq")
    assert sorted(k or b"" for _p, _o, k, _v in dead) == [b"o150", b"o7"]
    assert app.stats.undecodable == 2
