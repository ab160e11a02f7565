"""The operations observers fed real reports directly: the bookkeeping the scraped tests
cannot reach cheaply (a Spark job's metrics, a revoked partition's lag series, the
fan-out dropping an observer that raises, the JSON log line)."""

from __future__ import annotations

import contextlib
import json
import logging
import time

from prometheus_client.parser import text_string_to_metric_families

import eosflow
from eosflow._observe import AbortReason, Observers
from eosflow._ops._logs import JsonLines
from eosflow._ops._metrics import PrometheusMetrics


def samples(m: PrometheusMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    out = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def report(
    outcome: eosflow.Outcome, reason: AbortReason | None = None
) -> eosflow.TransactionReport:
    now = time.monotonic()
    return eosflow.TransactionReport(
        outcome=outcome,
        reason=reason,
        detail=None if reason is None else "words",
        records=10,
        outputs=12,
        dead_lettered=1,
        started=now - 0.2,
        started_at=time.time() - 0.2,
        ended=now,
        phases=(("flush", now - 0.1, now - 0.05), ("end_txn", now - 0.05, now)),
        undecodable=1,
    )


def test_metrics_of_spark_jobs_reinits_and_a_revoked_partitions_lag() -> None:
    m = PrometheusMetrics()
    now = time.monotonic()
    m.spark_job(eosflow.SparkJobReport(now - 2.0, now, rows=500, cancelled=False))
    m.spark_job(eosflow.SparkJobReport(now - 9.0, now, rows=40, cancelled=True))
    m.producer_reinitialised(AbortReason.UNKNOWN_OUTCOME)
    m.partitions_assigned(frozenset({("in", 0), ("in", 1)}))
    m.lag_sampled({("in", 0): 7, ("in", 1): 0, ("elsewhere", 3): 99})
    m.transaction_ended(report(eosflow.Outcome.COMMITTED))
    m.transaction_ended(report(eosflow.Outcome.RECOVERED, AbortReason.UNKNOWN_OUTCOME))
    s = samples(m)
    assert s[("eosflow_spark_job_seconds_count", ())] == 2
    assert s[("eosflow_spark_job_rows_sum", ())] == 540
    assert s[("eosflow_spark_jobs_cancelled_total", ())] == 1
    assert s[("eosflow_producer_reinitialisations_total", (("reason", "unknown_outcome"),))] == 1
    assert s[("eosflow_consumer_lag", (("partition", "0"), ("topic", "in")))] == 7
    assert ("eosflow_consumer_lag", (("partition", "3"), ("topic", "elsewhere"))) not in s
    assert s[("eosflow_records_consumed_total", ())] == 10  # the committed one only
    assert s[("eosflow_records_undecodable_total", ())] == 1  # likewise
    assert s[("eosflow_records_aborted_total", ())] == 10
    assert s[("eosflow_transaction_aborts_total", (("reason", "unknown_outcome"),))] == 1
    assert s[("eosflow_commit_phase_seconds_count", (("phase", "flush"),))] == 2
    assert s[("eosflow_commit_phase_seconds_count", (("phase", "offsets"),))] == 0

    m.partitions_revoked(frozenset({("in", 0)}))
    s = samples(m)
    assert ("eosflow_consumer_lag", (("partition", "0"), ("topic", "in"))) not in s
    assert s[("eosflow_consumer_lag", (("partition", "1"), ("topic", "in")))] == 0
    assert s[("eosflow_assigned_partitions", ())] == 1


def test_an_observer_that_raises_is_dropped_not_fatal(caplog: object) -> None:
    seen: list[str] = []

    class Broken(eosflow.Observer):
        def transaction_ended(self, report: eosflow.TransactionReport) -> None:
            raise RuntimeError("observer bug")

    class Fine(eosflow.Observer):
        def transaction_ended(self, report: eosflow.TransactionReport) -> None:
            seen.append(report.outcome.value)

    broken = Broken()
    fan = Observers([broken, Fine()])
    fan.transaction_ended(report(eosflow.Outcome.COMMITTED))
    fan.transaction_ended(report(eosflow.Outcome.COMMITTED))
    assert seen == ["committed", "committed"]
    assert broken not in fan.members


def test_json_log_lines() -> None:
    record = logging.LogRecord("eosflow.app", logging.WARNING, __file__, 1, "x=%d", (3,), None)
    entry = json.loads(JsonLines().format(record))
    assert entry["level"] == "WARNING" and entry["message"] == "x=3"
    assert entry["time"].endswith("+00:00") and "progress" not in entry


def test_a_spark_job_is_a_child_span_of_its_transaction() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from eosflow._ops._tracing import Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider.get_tracer("test"))
    txn = report(eosflow.Outcome.COMMITTED)
    tracing.spark_job(eosflow.SparkJobReport(txn.started + 0.01, txn.started + 0.09, rows=64))
    tracing.transaction_ended(txn)
    tracing.transaction_ended(report(eosflow.Outcome.COMMITTED))  # no job in this one
    spans = {s.name: s for s in exporter.get_finished_spans()}
    job, parents = spans["eosflow.spark.job"], exporter.get_finished_spans()
    first = next(s for s in parents if s.name == "eosflow.transaction")
    assert job.parent is not None and job.parent.span_id == first.context.span_id
    assert job.attributes["eosflow.rows"] == 64
    assert abs((job.end_time - job.start_time) / 1e9 - 0.08) < 1e-3
    assert first.start_time <= job.start_time and job.end_time <= first.end_time
    assert sum(s.name == "eosflow.spark.job" for s in parents) == 1


def test_a_processor_attribute_named_observer_is_refused_not_overwritten() -> None:
    import pytest

    class Mine(eosflow.Processor):
        def __init__(self) -> None:
            self.observer = "my own"  # type: ignore[assignment]

    cfg = eosflow.EosConfig(
        bootstrap_servers="127.0.0.1:1", group_id="g", input_topics=("in",), transactional_id="t"
    )
    with pytest.raises(eosflow.ConfigError, match=r"Mine.observer is eosflow's"):
        eosflow.EosApp(Mine(), cfg)

    class Theirs(eosflow.Processor):
        observer = "a class attribute"  # type: ignore[assignment]

    with pytest.raises(eosflow.ConfigError, match=r"Theirs.observer is eosflow's"):
        eosflow.EosApp(Theirs(), cfg)


# The app writes nothing into the user's processor: its observers are the processor's
# through the app's seat while the app runs (on_start here), and two apps of one
# processor (a restart) each give their own. Caught: EosApp setting processor.observer
# (the instance's __dict__ changes), the seat not set around the run (on_start sees the
# idle observer).
def test_the_app_writes_nothing_into_the_processor_and_lends_it_its_observers() -> None:
    import asyncio

    seen: list[eosflow.Observer] = []

    class Watch(eosflow.Processor):
        async def on_start(self) -> None:
            seen.append(self.observer)
            raise RuntimeError("enough")  # the app stops here, before any broker

    cfg = eosflow.EosConfig(
        bootstrap_servers="127.0.0.1:1", group_id="g", input_topics=("in",), transactional_id="t"
    )
    proc = Watch()
    before = dict(vars(proc))
    outside = proc.observer
    apps = [eosflow.EosApp(proc, cfg), eosflow.EosApp(proc, cfg)]
    for app in apps:
        with contextlib.suppress(eosflow.FatalError):
            asyncio.run(app.run())
    assert vars(proc) == before
    assert len(seen) == 2 and seen[0] is apps[0].observers and seen[1] is apps[1].observers
    assert seen[0] is not seen[1] and all(s is not outside for s in seen)
    assert proc.observer is outside  # after the runs: the idle one again


def test_an_idle_service_says_so_at_most_once_a_minute(caplog: object) -> None:
    """Nothing flowing and no lag: the progress line is silent, but an idle line comes at
    most once every IDLE_EVERY_S, with how long nothing flowed, the lag and the last
    commit (an operator cannot tell a silent service from a stuck one)."""
    import pytest

    from eosflow._ops._progress import IDLE_EVERY_S, Progress

    assert isinstance(caplog, pytest.LogCaptureFixture)
    p = Progress(10.0)
    t0 = p._since  # the interval's clock starts at construction
    done = report(eosflow.Outcome.COMMITTED)
    p.transaction_ended(eosflow.TransactionReport(**{**vars_of(done), "ended": t0 + 5}))
    p.partitions_assigned(frozenset({("in", 0), ("in", 1)}))
    p.lag_sampled({("in", 0): 0, ("in", 1): 0})
    with caplog.at_level(logging.INFO, logger="eosflow.progress"):
        for k in range(1, 14):  # every 10 s for 130 s
            p.emit(t0 + 10 * k)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("progress: 1 rec/s (10 records in 10.0 s)")
    idle = [(r.getMessage(), r.progress) for r in caplog.records[1:]]  # type: ignore[attr-defined]
    assert [m for m, _ in idle] == [
        "idle: no records for 1 min 5 s, lag 0 over 2 partitions, last commit 1 min 5 s ago",
        "idle: no records for 2 min 5 s, lag 0 over 2 partitions, last commit 2 min 5 s ago",
    ]
    assert IDLE_EVERY_S == 60.0 and idle[0][1]["idle_s"] == 65.0
    assert idle[0][1]["last_commit_s_ago"] == 65.0


def vars_of(r: eosflow.TransactionReport) -> dict[str, object]:
    return {f: getattr(r, f) for f in r.__dataclass_fields__}
