"""Health probes, abort reasons, tracing and the progress line, driven by the test
cluster's fault injection (the metrics port is scraped over HTTP as a prober would)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

import pytest
from aiokafka import AIOKafkaProducer
from kit import app_config, eventually
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_metrics import get, scrape, value

import eosflow
from eosflow._ops._logs import JsonLines
from eosflow._ops._tracing import Tracing
from eosflow._protocol import _codes as codes
from eosflow.testing import FakeCluster

N = 300


class Copy(eosflow.Processor):
    def __init__(self, block_at: int | None = None, block_s: float = 0.0) -> None:
        self.block_at, self.block_s = block_at, block_s

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        if record.offset == self.block_at:
            self.block_at = None
            time.sleep(self.block_s)  # noqa: ASYNC251 (blocking the loop is the point)
        return eosflow.Output("out", record.value, key=record.key)


@pytest.fixture
async def cluster(cluster: FakeCluster) -> FakeCluster:
    cluster.create_topic("in", 2)
    cluster.create_topic("out", 1)
    return cluster


def cfg(c: FakeCluster, **ops: object) -> eosflow.EosConfig:
    # the aborts these tests count are made by refusing the classic forced heartbeat
    return app_config(
        c,
        session_timeout_s=6.0,
        heartbeat_interval_s=0.2,
        transaction_timeout_s=5.0,
        group_protocol="classic",
        ops={"metrics_port": 0, "progress_interval_s": 0, **ops},
    )


async def seed(c: FakeCluster, n: int = N) -> None:
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await p.start()
    try:
        await asyncio.gather(*[await p.send("in", b"v%d" % i, partition=i % 2) for i in range(n)])
    finally:
        await p.stop()


async def probe(app: eosflow.EosApp, path: str) -> tuple[int, str]:
    port = app.ops.port
    assert port is not None
    status, text = await asyncio.to_thread(get, port, path)
    return status, text.strip()


# /readyz: unready before any assignment, ready once committing, unready when the broker
# holds commits (EndTxn held) past ready_stall_s while input waits, ready again after.
async def test_readyz_follows_commit_progress(cluster: FakeCluster) -> None:
    c = cluster
    app = eosflow.EosApp(Copy(), cfg(c, ready_stall_s=1.0))
    async with app:
        # nothing to consume yet; the group may not have assigned anything either
        status, why = await probe(app, "/readyz")
        assert status == 503 and why in (
            "no partitions assigned",
            "waiting for the lag of every assigned partition",
        )
        await seed(c)

        async def ready() -> bool:
            assert app.failure is None, app.failure
            return (await probe(app, "/readyz"))[0] == 200

        await eventually(ready, timeout_s=20, what="ready")
        assert c.committed("g", "in")  # it committed before it said so, or had no lag
        hold = c.intercept("EndTxn", hold=True)
        await seed(c, 100)  # lag above zero while the commit is held
        await hold.matched()

        async def stalled() -> bool:
            status, why = await probe(app, "/readyz")
            return status == 503 and why.startswith("no commit for")

        await eventually(stalled, timeout_s=20, what="unready while commits are held")
        assert (await probe(app, "/livez")) == (200, "live")  # stalled, but alive
        hold.release()
        await eventually(ready, timeout_s=20, what="ready again once commits go through")


# /livez: 503 while the event loop is blocked (the HTTP server answers from its own
# thread), 200 again after; and 503 once the app has failed.
async def test_livez_fails_while_the_loop_is_blocked(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, 10)
    app = eosflow.EosApp(Copy(block_at=4, block_s=3.0), cfg(c, liveness_block_s=1.0))
    port = None
    seen: list[tuple[int, str]] = []
    stop = threading.Event()

    def prober() -> None:  # a kubelet: probes every 0.1 s from outside the loop
        assert port is not None
        while not stop.is_set():
            status, text = get(port, "/livez")
            seen.append((status, text.strip()))
            time.sleep(0.1)

    async with app:
        port = app.ops.port
        thread = threading.Thread(target=prober, daemon=True)
        thread.start()
        try:
            await eventually(
                lambda: asyncio.sleep(0, app.stats.records >= 10),
                timeout_s=20,
                what="the blocked record got through",
            )
        finally:
            stop.set()
            await asyncio.to_thread(thread.join)
    blocked = [why for status, why in seen if status == 503]
    assert blocked and all(w.startswith("the event loop has not run for") for w in blocked)
    assert seen[0][0] == 200 and seen[-1] == (200, "live"), "alive before and after"


async def test_livez_fails_once_the_app_failed(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, 10)
    leaving = asyncio.Event()
    finish = asyncio.Event()

    class Fails(Copy):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            raise ValueError("no dead-letter topic: the app stops")

        async def on_stop(self) -> None:  # the app has failed and is shutting down
            leaving.set()
            await finish.wait()

    app = eosflow.EosApp(Fails(), cfg(c))
    with pytest.raises(eosflow.ProcessingError):
        async with app:
            await leaving.wait()
            status, why = await probe(app, "/livez")
            finish.set()
    # asserted here: raised inside the block, it would only be the ProcessingError's context
    assert status == 503 and why.startswith("the app failed: ProcessingError")


# Abort reasons come from where the abort was decided: a forced heartbeat refused by the
# coordinator is `heartbeat_failed`, counted once, and the work is redone.
async def test_a_refused_forced_heartbeat_is_counted_by_its_reason(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    rule = c.intercept("Heartbeat", version=4, error=codes.UNKNOWN_MEMBER_ID)
    app = eosflow.EosApp(Copy(), cfg(c))
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return sum(c.committed("g", "in").values()) == N

        await eventually(done, timeout_s=30, what="all committed")
        s = await scrape(app)
    assert rule.hits == 1
    assert value(s, "eosflow_transaction_aborts_total", reason="heartbeat_failed") == 1
    assert value(s, "eosflow_transactions_total", outcome="aborted") == 1
    assert value(s, "eosflow_records_consumed_total") == N
    assert value(s, "eosflow_records_aborted_total") > 0  # the aborted one's, redone


# One span per transaction, its commit phases as children, an aborted one marked ERROR
# with its reason; built from the reports with the times they recorded.
async def test_each_transaction_is_a_span_with_its_phases(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    c.intercept("Heartbeat", version=4, error=codes.UNKNOWN_MEMBER_ID)
    tracing = Tracing(provider.get_tracer("test"))
    app = eosflow.EosApp(Copy(), cfg(c, metrics_port=None, tracing=False), [tracing])
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return sum(c.committed("g", "in").values()) == N

        await eventually(done, timeout_s=30, what="all committed")
    spans = exporter.get_finished_spans()
    txns = [s for s in spans if s.name == "eosflow.transaction"]
    assert len(txns) == app.stats.committed + app.stats.aborted + app.stats.recovered
    assert sum(s.attributes["eosflow.records"] for s in txns if s.status.is_ok) == N
    failed = [s for s in txns if not s.status.is_ok]
    reasons = [s.attributes["eosflow.abort_reason"] for s in failed]
    assert "heartbeat_failed" in reasons and len(reasons) == len(failed), reasons
    committed = next(s for s in txns if s.status.is_ok and s.attributes["eosflow.records"])
    children = [s for s in spans if s.parent and s.parent.span_id == committed.context.span_id]
    assert [s.name for s in children] == [
        "eosflow.commit.flush",
        "eosflow.commit.offsets",
        "eosflow.commit.heartbeat",
        "eosflow.commit.end_txn",
    ]
    assert all(
        committed.start_time <= s.start_time <= s.end_time <= committed.end_time for s in children
    )


# The progress line: once per interval, with the rate, lag, commits and aborts; as JSON
# its figures are fields.
async def test_progress_lines_carry_their_figures(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    c = cluster
    await seed(c)
    c.intercept("Heartbeat", version=4, error=codes.UNKNOWN_MEMBER_ID)  # one abort, redone
    app = eosflow.EosApp(Copy(), cfg(c, metrics_port=None, progress_interval_s=0.5))
    with caplog.at_level(logging.INFO, logger="eosflow.progress"):
        async with app:

            async def logged() -> bool:
                assert app.failure is None, app.failure
                done = sum(r.progress["records"] for r in caplog.records if hasattr(r, "progress"))
                return done >= N and app.last_outcome is eosflow.Outcome.COMMITTED

            await eventually(logged, timeout_s=30, what="progress lines adding up to N")
    lines = [r for r in caplog.records if hasattr(r, "progress")]
    # committed records only: the aborted transaction's are counted once, when redone
    assert sum(r.progress["records"] for r in lines) == N  # type: ignore[attr-defined]
    assert sum(r.progress["abort_reasons"].get("heartbeat_failed", 0) for r in lines) == 1
    assert all(r.getMessage().startswith("progress: ") for r in lines)
    # the first line after a commit (the first may come before it: the start is quick)
    first = next(r for r in lines if r.progress["committed"] >= 1)  # type: ignore[attr-defined]
    entry = json.loads(JsonLines().format(first))
    assert entry["logger"] == "eosflow.progress" and entry["progress"]["committed"] >= 1
    assert set(entry["progress"]) >= {"records_per_s", "lag", "aborted", "abort_reasons"}


# An embedding app keeps the metrics in its own registry (no port of eosflow's).
async def test_an_embedding_app_registers_the_metrics_in_its_own_registry(
    cluster: FakeCluster,
) -> None:
    from prometheus_client import CollectorRegistry

    c = cluster
    await seed(c)
    mine = CollectorRegistry()
    app = eosflow.EosApp(
        Copy(), cfg(c, metrics_port=None), [eosflow.PrometheusMetrics(registry=mine)]
    )
    async with app:
        assert app.ops.port is None

        async def done() -> bool:
            assert app.failure is None, app.failure
            return mine.get_sample_value("eosflow_records_consumed_total") == N

        await eventually(done, timeout_s=30, what="the app's metrics in the embedder's registry")
    committed = mine.get_sample_value("eosflow_transactions_total", {"outcome": "committed"})
    assert committed == app.stats.committed
    assert mine.get_sample_value("process_resident_memory_bytes") is None  # not ours to add


# A run that fails before its loop (a store name that cannot name a changelog) still
# closes the port that `async with` opened: a retry may listen on it again.
async def test_a_failed_start_leaves_no_port_open(cluster: FakeCluster) -> None:
    import socket

    class BadStore(Copy):
        stores = {"bad name": eosflow.JSON}

    app = eosflow.EosApp(BadStore(), cfg(cluster))
    with pytest.raises(eosflow.ConfigError, match="store name 'bad name'"):
        async with app:
            port = app.ops.port
            assert port is not None
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))
