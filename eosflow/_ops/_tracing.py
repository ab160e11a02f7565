"""``Tracing``: OpenTelemetry spans built from the app's reports.

One span per transaction (``eosflow.transaction``: outcome, abort reason, records,
outputs, partitions), with a child per commit phase (``eosflow.commit.flush`` ...
``eosflow.commit.end_txn``) and per Spark job of that transaction
(``eosflow.spark.job``). Spans are built after the fact with their recorded times, so
tracing adds nothing to the commit path; per-record work is not traced.

Needs ``opentelemetry-api`` (the otel extra); without it ``Tracing.available()`` is
False and the app runs without. With the API but no SDK configured, spans are no-ops.
A transaction that did not commit gets an ERROR status carrying its reason.
"""

from __future__ import annotations

from typing import Any

from .._observe import Observer, Outcome, SparkJobReport, TransactionReport

try:
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # pragma: no cover - the otel extra is not installed
    trace = None  # type: ignore[assignment]


class Tracing(Observer):
    def __init__(self, tracer: Any = None) -> None:
        assert trace is not None, "check Tracing.available() first"
        self._tracer = tracer if tracer is not None else trace.get_tracer("eosflow")
        self._jobs: list[SparkJobReport] = []

    @staticmethod
    def available() -> bool:
        return trace is not None

    def spark_job(self, report: SparkJobReport) -> None:
        self._jobs.append(report)  # a child of the transaction it ran in, once that ends

    def transaction_ended(self, report: TransactionReport) -> None:
        # monotonic times on the wall clock, anchored at the transaction's start
        shift = report.started_at - report.started

        def ns(t: float) -> int:
            return int((t + shift) * 1e9)

        attributes: dict[str, Any] = {
            "eosflow.outcome": report.outcome.value,
            "eosflow.records": report.records,
            "eosflow.outputs": report.outputs,
            "eosflow.dead_lettered": report.dead_lettered,
            "eosflow.partitions": [f"{t}[{p}]" for t, p in report.partitions],
        }
        if report.reason is not None:
            attributes["eosflow.abort_reason"] = report.reason.value
        span = self._tracer.start_span(
            "eosflow.transaction", start_time=ns(report.started), attributes=attributes
        )
        context = trace.set_span_in_context(span)
        for phase, start, end in report.phases:
            child = self._tracer.start_span(
                f"eosflow.commit.{phase}", context=context, start_time=ns(start)
            )
            child.end(end_time=ns(end))
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            child = self._tracer.start_span(
                "eosflow.spark.job",
                context=context,
                start_time=ns(job.started),
                attributes={"eosflow.rows": job.rows, "eosflow.cancelled": job.cancelled},
            )
            child.end(end_time=ns(job.ended))
        if report.outcome is not Outcome.COMMITTED:
            span.set_status(Status(StatusCode.ERROR, report.detail or report.outcome.value))
        span.end(end_time=ns(report.ended))
