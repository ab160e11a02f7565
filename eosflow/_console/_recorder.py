"""``Recorder``: the last minutes of one app, kept for its console page.

An ``Observer`` like the metrics and the progress line: it is told once per transaction,
rebalance, recovery, Spark job and lag sample (never per record), and keeps

- a point a second for the last ``WINDOW_S`` seconds: transactions committed and
  aborted, records and outputs committed, dead letters, and each committed
  transaction's commit time (its first phase's start to its last phase's end) and the
  longest of each phase (``PHASES``) -- what the page's charts draw;
- the totals since the app started;
- the last ``EVENTS`` events: partitions assigned and revoked, transactions that did not
  commit with their reason and its words, the producer re-initialised, Spark jobs;
- the partitions held and the lag of each at the last sample.

The trade-off: a point a second costs a few kilobytes for five minutes and bounds what the
page can show (no per-transaction detail older than the event list); the page asks for a
snapshot at most once a second. The observer's calls come from the event loop and
``snapshot`` from the HTTP server's threads, so both take one lock, held for
a few microseconds by an observer call. Nothing here names a setting: no secret can
reach the page through it.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._observe import (
    PHASES,
    Observer,
    Outcome,
    SparkJobReport,
    TransactionReport,
)
from .._records import Partition

WINDOW_S = 300
"""Seconds of history the charts hold: a point a second."""
EVENTS = 200
"""Events the timeline holds, newest last."""


@dataclass
class _Second:
    """One second's transactions."""

    committed: int = 0
    aborted: int = 0
    records: int = 0
    outputs: int = 0
    dead_lettered: int = 0
    commits_ms: list[float] = field(default_factory=list)
    phases_ms: dict[str, float] = field(default_factory=dict)  # the longest of each


class Recorder(Observer):
    """What the console shows of one app (see the module's doc). ``clock`` gives the
    wall-clock time (``time.time``), a parameter for the tests."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._seconds: dict[int, _Second] = {}
        self._events: deque[dict[str, Any]] = deque(maxlen=EVENTS)
        self._held: set[Partition] = set()
        self._lag: dict[Partition, int] = {}
        self._totals = dict.fromkeys(
            ("committed", "aborted", "records", "outputs", "dead_lettered", "rebalances"), 0
        )
        self._started = clock()

    # --- the observer -----------------------------------------------------------------

    def transaction_ended(self, report: TransactionReport) -> None:
        if report.outcome is Outcome.EMPTY:
            return
        now = self._clock()
        with self._lock:
            second = self._second(now)
            totals = self._totals
            if report.outcome is Outcome.COMMITTED:
                second.committed += 1
                second.records += report.records
                second.outputs += report.outputs
                second.dead_lettered += report.dead_lettered
                totals["committed"] += 1
                totals["records"] += report.records
                totals["outputs"] += report.outputs
                totals["dead_lettered"] += report.dead_lettered
                if report.phases:
                    began = min(b for _, b, _ in report.phases)
                    ended = max(e for *_, e in report.phases)
                    second.commits_ms.append((ended - began) * 1e3)
                    for name, b, e in report.phases:
                        ms = (e - b) * 1e3
                        second.phases_ms[name] = max(second.phases_ms.get(name, 0.0), ms)
                return
            second.aborted += 1
            totals["aborted"] += 1
            reason = report.reason.value if report.reason is not None else report.outcome.value
            words = f": {report.detail}" if report.detail else ""
            self._event(now, "aborted", f"{report.outcome.value} ({reason}){words}")

    def partitions_assigned(self, partitions: frozenset[Partition]) -> None:
        with self._lock:
            self._held |= partitions
            self._totals["rebalances"] += 1
            self._event(self._clock(), "assigned", _named(partitions))

    def partitions_revoked(self, partitions: frozenset[Partition]) -> None:
        with self._lock:
            self._held -= partitions
            for p in partitions:
                self._lag.pop(p, None)
            self._event(self._clock(), "revoked", _named(partitions))

    def producer_reinitialised(self, reason: Any) -> None:
        with self._lock:
            self._event(self._clock(), "recovered", f"producer re-initialised ({reason.value})")

    def spark_job(self, report: SparkJobReport) -> None:
        how = "cancelled past its budget" if report.cancelled else "done"
        text = f"{report.rows} rows in {report.duration_s:.2f} s, {how}"
        with self._lock:
            self._event(self._clock(), "spark", text)

    def lag_sampled(self, lag: Mapping[Partition, int]) -> None:
        with self._lock:
            self._lag = dict(lag)

    # --- the page's view --------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The page's data, plain JSON types: ``now`` (wall clock, s), ``started``,
        ``totals``, ``series`` (one entry per second of the last ``WINDOW_S``, oldest
        first: ``t`` and each count, ``commit_p50_ms`` / ``commit_max_ms`` and
        ``phases_ms``, None where no transaction committed), ``partitions`` (held, with
        their lag at the last sample, None before one) and ``events``."""
        now = self._clock()
        last = int(now) - 1  # the last whole second
        with self._lock:
            first = max(int(self._started), last - WINDOW_S + 1)
            for t in [t for t in self._seconds if t < last - WINDOW_S]:
                del self._seconds[t]
            series = [_point(t, self._seconds.get(t)) for t in range(first, last + 1)]
            partitions = [
                {"topic": p[0], "partition": p[1], "lag": self._lag.get(p)}
                for p in sorted(self._held)
            ]
            return {
                "now": now,
                "started": self._started,
                "totals": dict(self._totals),
                "series": series,
                "partitions": partitions,
                "events": list(self._events),
            }

    def _second(self, now: float) -> _Second:
        t = int(now)
        second = self._seconds.get(t)
        if second is None:
            second = self._seconds[t] = _Second()
        return second

    def _event(self, now: float, kind: str, text: str) -> None:
        self._events.append({"at": now, "kind": kind, "text": text})


def _point(t: int, second: _Second | None) -> dict[str, Any]:
    s = second or _Second()
    return {
        "t": t,
        "committed": s.committed,
        "aborted": s.aborted,
        "records": s.records,
        "outputs": s.outputs,
        "dead_lettered": s.dead_lettered,
        "commit_p50_ms": statistics.median(s.commits_ms) if s.commits_ms else None,
        "commit_max_ms": max(s.commits_ms) if s.commits_ms else None,
        "phases_ms": {name: s.phases_ms.get(name) for name in PHASES},
    }


def _named(partitions: frozenset[Partition]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(partitions)) or "none"
