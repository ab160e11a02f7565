"""``PrometheusMetrics``: the app's metrics, kept from its reports (an ``Observer``).

Every metric is updated once per event -- a transaction's end, a rebalance, a recovery,
a Spark job, a lag sample -- never per record, so the cost does not grow with the rate
(``python -m benchmarks metrics`` measures it). Labels are bounded: an outcome, an abort
reason, a commit phase, a partition, a pipeline stage; never a key.

Records are counted by the outcome of their transaction: ``consumed``, ``produced`` and
``dead_lettered`` count committed work only (each input once, exactly as the output
topics see it), while ``aborted`` counts the records of transactions that did not
commit (they are redone, and counted again when they commit).

Default: a registry of its own, with prometheus_client's process and platform collectors
(``process_resident_memory_bytes``, CPU seconds, open files), which ``eosflow run
--metrics-port`` serves; an embedding app passes its own registry instead
(``PrometheusMetrics(registry=...)``). Needs
``prometheus_client`` (the metrics extra); without it building one is a ``ConfigError``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .._errors import ConfigError
from .._observe import PHASES, AbortReason, Observer, Outcome, SparkJobReport, TransactionReport
from .._records import Partition
from ._progress import Stages, stage_lag

try:
    import prometheus_client as prom
except ImportError:  # pragma: no cover - the metrics extra is not installed
    prom = None  # type: ignore[assignment]


# commit phases and whole transactions: 1 ms (a local broker) to 30 s (a stalled one)
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_ROWS = (10, 100, 1_000, 10_000, 100_000, 1_000_000)


def require_prometheus() -> Any:
    if prom is None:
        raise ConfigError(
            "metrics need prometheus_client: pip install 'eosflow[metrics]' "
            "(or leave metrics_port unset)"
        )
    return prom


class PrometheusMetrics(Observer):
    """The metrics of one app, in ``registry`` (a new one if not given)."""

    def __init__(self, registry: Any = None) -> None:
        p = require_prometheus()
        if registry is None:  # a registry of its own: with the process' CPU, memory, files
            registry = p.CollectorRegistry()
            p.ProcessCollector(registry=registry)
            p.PlatformCollector(registry=registry)
        r = self.registry = registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
            return p.Counter(name, doc, labels, registry=r)

        self.consumed = counter(
            "eosflow_records_consumed", "input records of committed transactions"
        )
        self.produced = counter(
            "eosflow_records_produced", "output records of committed transactions"
        )
        self.dead_lettered = counter(
            "eosflow_records_dead_lettered", "records sent to the dead-letter topic (committed)"
        )
        self.undecodable = counter(
            "eosflow_records_undecodable",
            "records dead-lettered because they did not decode as their topic declares "
            "(committed; counted in eosflow_records_dead_lettered too)",
        )
        self.aborted_records = counter(
            "eosflow_records_aborted", "records of transactions that did not commit (redone)"
        )
        self.dropped_ahead = counter(
            "eosflow_records_dropped_ahead",
            "records processed ahead of the next transaction while a commit was in flight, "
            "then dropped because it did not commit or partitions moved (redone; "
            "process_ahead only)",
        )
        self.late = counter(
            "eosflow_late_records",
            "records whose every window had closed, left out of them (committed), by window",
            ("window",),
        )
        self.transactions = counter(
            "eosflow_transactions", "ended transactions by outcome", ("outcome",)
        )
        self.aborts = counter(
            "eosflow_transaction_aborts",
            "transactions that did not commit, by reason",
            ("reason",),
        )
        self.phase_seconds = p.Histogram(
            "eosflow_commit_phase_seconds",
            "duration of each step of a commit: flush, offsets (sent during the flush), "
            "heartbeat, end_txn",
            ("phase",),
            buckets=_SECONDS,
            registry=r,
        )
        self.txn_seconds = p.Histogram(
            "eosflow_transaction_seconds",
            "duration of a transaction from its begin to its end, by outcome",
            ("outcome",),
            buckets=_SECONDS,
            registry=r,
        )
        self.last_commit = p.Gauge(
            "eosflow_last_commit_timestamp_seconds",
            "wall-clock time of the last committed transaction",
            registry=r,
        )
        self.rebalances = counter(
            "eosflow_rebalances", "assignments received (each rebalance that gave partitions)"
        )
        self.revocations = counter(
            "eosflow_revocations", "revocations received (each rebalance that took partitions)"
        )
        self.assigned = p.Gauge(
            "eosflow_assigned_partitions", "input partitions held by this instance", registry=r
        )
        self.reinits = counter(
            "eosflow_producer_reinitialisations",
            "transactional producers replaced (KIP-360 recovery), by cause",
            ("reason",),
        )
        self.lag = p.Gauge(
            "eosflow_consumer_lag",
            "records of an input partition not yet committed: its last stable offset "
            "minus the group's committed offset",
            ("topic", "partition"),
            registry=r,
        )
        self.stage_lag = p.Gauge(
            "eosflow_stage_lag",
            "a pipeline stage's records not yet committed: eosflow_consumer_lag summed over "
            "the partitions this instance holds of the topics the stage reads",
            ("stage",),
            registry=r,
        )
        self.stages: Stages = {}  # a pipeline's (``Operations.name_stages``)
        self.spark_seconds = p.Histogram(
            "eosflow_spark_job_seconds", "duration of each Spark job", buckets=_SECONDS, registry=r
        )
        self.spark_rows = p.Histogram(
            "eosflow_spark_job_rows", "input rows of each Spark job", buckets=_ROWS, registry=r
        )
        self.spark_cancelled = counter(
            "eosflow_spark_jobs_cancelled", "Spark jobs cancelled past their time budget"
        )
        # every label value exists from the start: a rate() over a series that appears
        # late misses its first increase
        for outcome in (Outcome.COMMITTED, Outcome.ABORTED, Outcome.RECOVERED):
            self.transactions.labels(outcome.value)
            self.txn_seconds.labels(outcome.value)
        for reason in AbortReason:
            self.aborts.labels(reason.value)
        for phase in PHASES:
            self.phase_seconds.labels(phase)
        self._held: set[Partition] = set()
        self._lagging: set[Partition] = set()

    def transaction_ended(self, report: TransactionReport) -> None:
        self.transactions.labels(report.outcome.value).inc()
        self.txn_seconds.labels(report.outcome.value).observe(report.duration_s)
        for phase, start, end in report.phases:
            self.phase_seconds.labels(phase).observe(end - start)
        if report.outcome is Outcome.COMMITTED:
            self.consumed.inc(report.records)
            self.produced.inc(report.outputs)
            self.dead_lettered.inc(report.dead_lettered)
            self.undecodable.inc(report.undecodable)
            self.last_commit.set(time.time())
            return
        self.aborted_records.inc(report.records)
        if report.reason is not None:
            self.aborts.labels(report.reason.value).inc()

    def partitions_assigned(self, partitions: frozenset[Partition]) -> None:
        self.rebalances.inc()
        self._held |= partitions
        self.assigned.set(len(self._held))

    def partitions_revoked(self, partitions: frozenset[Partition]) -> None:
        self.revocations.inc()
        self._held -= partitions
        self.assigned.set(len(self._held))
        for tp in partitions & self._lagging:
            self.lag.remove(tp[0], str(tp[1]))  # a partition held elsewhere is not ours
        self._lagging -= partitions

    def producer_reinitialised(self, reason: AbortReason) -> None:
        self.reinits.labels(reason.value).inc()

    def work_dropped(self, records: int) -> None:
        self.dropped_ahead.inc(records)

    def late_records(self, window: str, records: int) -> None:
        self.late.labels(window).inc(records)

    def spark_job(self, report: SparkJobReport) -> None:
        self.spark_seconds.observe(report.duration_s)
        self.spark_rows.observe(report.rows)
        if report.cancelled:
            self.spark_cancelled.inc()

    def lag_sampled(self, lag: Mapping[Partition, int]) -> None:
        held = {tp: n for tp, n in lag.items() if tp in self._held}
        for tp, records in held.items():
            self.lag.labels(tp[0], str(tp[1])).set(records)
            self._lagging.add(tp)
        if self.stages:
            for stage, records in stage_lag(held, self.stages).items():
                self.stage_lag.labels(stage).set(records)
