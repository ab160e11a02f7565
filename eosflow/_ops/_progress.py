"""``Progress``: one log line per interval saying how the app keeps up.

    progress: 52,113 rec/s (521,130 records in 10.0 s), lag 1,200 over 6 partitions,
    98 commits, 2 aborted (revoked 2), 0 recovered

Records are those of committed transactions (what the outputs gained); lag is the last
sample's total against the last stable offsets. A pipeline's line adds each stage's lag
(``stage_lag``: the partitions of the topics it reads, repartition topics too), in the
graph's order -- ``lag 1,200 over 6 partitions (by stage: orders 1,000, count 200)``.
The same figures ride on the log record as ``record.progress`` (a dict, the stages' in
``stage_lag``), which ``--log-format json`` prints as fields. Default every 10 s
(``progress_interval_s``; 0 turns it off).

An interval with nothing happening and no lag logs nothing, except an idle line at most
once every ``IDLE_EVERY_S``, so a service waiting for input says so rather than going
silent (an operator could not tell it from a stuck one):

    idle: no records for 2 min 10 s, lag 0 over 6 partitions, last commit 2 min 10 s ago
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterable, Mapping

from .._observe import Observer, Outcome, TransactionReport
from .._records import Partition

log = logging.getLogger("eosflow.progress")

IDLE_EVERY_S = 60.0
"""While nothing flows, the idle line comes at most this often (and never sooner than the
first interval)."""


Stages = Mapping[str, frozenset[str]]
"""A pipeline's stages, in the graph's order, each with the topics it reads."""


def stage_lag(lag: Mapping[Partition, int], stages: Stages) -> dict[str, int]:
    """Each stage's lag: the sum over the sampled partitions of the topics it reads (a
    topic two stages read counts for both)."""
    return {
        stage: sum(n for (topic, _p), n in lag.items() if topic in topics)
        for stage, topics in stages.items()
    }


def stages_of(readers: Mapping[str, Iterable[str]]) -> Stages:
    """``Stages`` from each stage's topics, kept in the order given."""
    return {stage: frozenset(topics) for stage, topics in readers.items()}


class Progress(Observer):
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._since = time.monotonic()
        self._records = 0
        self._outcomes: collections.Counter[Outcome] = collections.Counter()
        self._reasons: collections.Counter[str] = collections.Counter()
        self._lag: Mapping[Partition, int] = {}
        self._flowed = self._since  # the last committed record, or the start
        self._committed_at: float | None = None  # the last commit (time.monotonic)
        self._idle_said = self._since  # the last line logged
        self.stages: Stages = {}  # a pipeline's (``Operations.name_stages``)

    def transaction_ended(self, report: TransactionReport) -> None:
        self._outcomes[report.outcome] += 1
        if report.outcome is Outcome.COMMITTED:
            self._records += report.records
            self._committed_at = report.ended
            if report.records:
                self._flowed = report.ended
        elif report.reason is not None:
            self._reasons[report.reason.value] += 1

    def lag_sampled(self, lag: Mapping[Partition, int]) -> None:
        self._lag = lag

    def partitions_revoked(self, partitions: frozenset[Partition]) -> None:
        self._lag = {tp: n for tp, n in self._lag.items() if tp not in partitions}

    def due(self, now: float) -> bool:
        return now - self._since >= self.interval_s

    def emit(self, now: float) -> None:
        """Log the interval's line (if anything happened or lag remains) and start the next."""
        span = max(now - self._since, 1e-9)
        lag = sum(self._lag.values())
        fields = {
            "interval_s": round(span, 3),
            "records": self._records,
            "records_per_s": round(self._records / span, 1),
            "lag": lag,
            "partitions": len(self._lag),
            "committed": self._outcomes[Outcome.COMMITTED],
            "aborted": self._outcomes[Outcome.ABORTED],
            "recovered": self._outcomes[Outcome.RECOVERED],
            "abort_reasons": dict(self._reasons),
        }
        by_stage = ""
        if self.stages:
            lags = stage_lag(self._lag, self.stages)
            fields["stage_lag"] = lags
            by_stage = " (by stage: " + ", ".join(f"{s} {n:,}" for s, n in lags.items()) + ")"
        if self._outcomes or lag:
            reasons = ", ".join(f"{k} {v}" for k, v in sorted(self._reasons.items()))
            log.info(
                "progress: %s rec/s (%s records in %.1f s), lag %s over %d partitions%s, "
                "%d commits, %d aborted%s, %d recovered",
                f"{fields['records_per_s']:,.0f}",
                f"{self._records:,}",
                span,
                f"{lag:,}",
                len(self._lag),
                by_stage,
                fields["committed"],
                fields["aborted"],
                f" ({reasons})" if reasons else "",
                fields["recovered"],
                extra={"progress": fields},
            )
            self._idle_said = now
        elif now - self._idle_said >= IDLE_EVERY_S:
            self._idle(now, fields, by_stage)
        self._since = now
        self._records = 0
        self._outcomes.clear()
        self._reasons.clear()

    def _idle(self, now: float, fields: dict[str, object], by_stage: str) -> None:
        idle_s = now - self._flowed
        last = self._committed_at
        fields = {**fields, "idle_s": round(idle_s, 1)}
        fields["last_commit_s_ago"] = None if last is None else round(now - last, 1)
        log.info(
            "idle: no records for %s, lag %s over %d partitions%s, %s",
            _duration(idle_s),
            f"{fields['lag']:,}",
            fields["partitions"],
            by_stage,
            "no commit yet" if last is None else f"last commit {_duration(now - last)} ago",
            extra={"progress": fields},
        )
        self._idle_said = now


def _duration(seconds: float) -> str:
    """``2 min 10 s``, ``45 s``, ``1 h 5 min``."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"
