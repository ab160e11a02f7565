"""``Recorder``: the last minutes of one app, kept for its console page.

An ``Observer`` like the metrics and the progress line: it is told once per transaction,
rebalance, recovery, Spark job and lag sample (never per record), and keeps

- a point a second for the last ``WINDOW_S`` seconds: transactions committed and not
  committed (aborted, or their outcome unknown and then recovered), records and outputs
  committed, dead letters, the committed transactions' median and longest commit time
  (the first phase's start to the last phase's end) and the longest of each phase
  (``PHASES``) -- what the page's charts draw. A second is summed up when the next one
  begins: its commit times are then dropped, so memory stays bounded whatever the rate
  and whether or not a page is open;
- the commit times of the last ``RECENT_S`` seconds (at most ``RECENT_MAX``), for the
  page's median commit time;
- the totals since the app started;
- the last ``EVENTS`` events: partitions assigned and revoked, transactions that did not
  commit with their reason and its words (the exception's text, cut at ``TEXT_MAX``
  characters), the producer re-initialised, Spark jobs;
- the partitions held and, at the last sample, where each stands: committed offset,
  position, last stable offset and lag (``offsets_sampled``, from the operations
  ticker, the lag among them);
- the late records each window left out (``late_records``), in total and per second;
- the Spark jobs: the longest to end in each second, and their count;
- the runtime's state at the last sample (``state_sampled``): what restores (each
  store or table of a partition held back, its records applied and the offset it reads
  towards) and each ready local copy's size (keys and bytes as RocksDB estimates them;
  for a tumbling or hopping window, the windows open, the oldest one's start and the
  stream time).

The observer's calls come from the event loop and ``snapshot`` from the HTTP server's
threads, so both take one lock; ``snapshot`` copies summaries under it and sorts the
recent commit times outside it. No setting passes through here: the words of an abort
are the only free text, and they are the processor's or the broker's.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._observe import PHASES, AbortReason, Observer, Outcome, SparkJobReport, TransactionReport
from .._records import Partition, PartitionOffsets, RestoreProgress, StateNow, StoreSize

WINDOW_S = 300
"""Seconds of history the charts hold: a point a second."""
EVENTS = 200
"""Events the timeline holds, newest last."""
RECENT_S = 10
"""Seconds over which the page's median commit time is taken."""
RECENT_MAX = 10_000
"""Commit times kept for it at most (the newest)."""
TEXT_MAX = 500
"""Characters of an event's text shown at most."""


@dataclass
class _Second:
    """One second's transactions, while it is the newest."""

    t: int
    committed: int = 0
    not_committed: int = 0
    records: int = 0
    outputs: int = 0
    dead_lettered: int = 0
    late: int = 0
    spark_max_s: float | None = None  # the longest Spark job that ended in this second
    commits_ms: list[float] = field(default_factory=list)
    phases_ms: dict[str, float] = field(default_factory=dict)  # the longest of each

    def summed_up(self) -> dict[str, Any]:
        ms = self.commits_ms
        return {
            "t": self.t,
            "committed": self.committed,
            "not_committed": self.not_committed,
            "records": self.records,
            "outputs": self.outputs,
            "dead_lettered": self.dead_lettered,
            "late": self.late,
            "spark_max_s": self.spark_max_s,
            "commit_p50_ms": statistics.median(ms) if ms else None,
            "commit_max_ms": max(ms) if ms else None,
            "phases_ms": {name: self.phases_ms.get(name) for name in PHASES},
        }


class Recorder(Observer):
    """What the console shows of one app (see the module's doc). ``clock`` gives the
    wall-clock time (``time.time``), a parameter for the tests."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._newest: _Second | None = None
        self._seconds: dict[int, dict[str, Any]] = {}  # summed up, the last WINDOW_S
        self._recent: deque[tuple[float, float]] = deque(maxlen=RECENT_MAX)  # (at, ms)
        self._events: deque[dict[str, Any]] = deque(maxlen=EVENTS)
        self._held: set[Partition] = set()
        self._offsets: dict[Partition, PartitionOffsets] = {}
        self._late: dict[str, int] = {}  # window -> late records since the start
        self._state = StateNow([], [])
        names = ("committed", "not_committed", "records", "outputs", "dead_lettered", "late")
        self._totals = dict.fromkeys((*names, "spark_jobs", "rebalances"), 0)
        self._started = clock()

    # --- the observer -----------------------------------------------------------------

    def transaction_ended(self, report: TransactionReport) -> None:
        if report.outcome is Outcome.EMPTY:
            return
        now = self._clock()
        with self._lock:
            second = self._second(now)
            totals = self._totals
            if report.outcome is not Outcome.COMMITTED:
                second.not_committed += 1
                totals["not_committed"] += 1
                why = report.reason.value if report.reason is not None else "unknown"
                words = f": {report.detail}" if report.detail else ""
                self._event(now, "aborted", f"{report.outcome.value} ({why}){words}")
                return
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
                ms = (ended - began) * 1e3
                second.commits_ms.append(ms)
                self._recent.append((now, ms))
                for name, b, e in report.phases:
                    longest = second.phases_ms.get(name, 0.0)
                    second.phases_ms[name] = max(longest, (e - b) * 1e3)

    def partitions_assigned(self, partitions: frozenset[Partition]) -> None:
        with self._lock:
            self._held |= partitions
            self._totals["rebalances"] += 1
            self._event(self._clock(), "assigned", _named(partitions))

    def partitions_revoked(self, partitions: frozenset[Partition]) -> None:
        with self._lock:
            self._held -= partitions
            for p in partitions:
                self._offsets.pop(p, None)
            self._event(self._clock(), "revoked", _named(partitions))

    def producer_reinitialised(self, reason: AbortReason) -> None:
        with self._lock:
            self._event(self._clock(), "recovered", f"producer re-initialised ({reason.value})")

    def spark_job(self, report: SparkJobReport) -> None:
        how = "cancelled past its budget" if report.cancelled else "done"
        text = f"{report.rows} rows in {report.duration_s:.2f} s, {how}"
        now = self._clock()
        with self._lock:
            second = self._second(now)
            longest = second.spark_max_s
            second.spark_max_s = max(longest or 0.0, report.duration_s)
            self._totals["spark_jobs"] += 1
            self._event(now, "spark", text)

    def late_records(self, window: str, records: int) -> None:
        now = self._clock()
        with self._lock:
            self._second(now).late += records
            self._totals["late"] += records
            self._late[window] = self._late.get(window, 0) + records

    def state_sampled(self, now: StateNow) -> None:
        """What restores and what the local copies hold now (the operations ticker's
        sample)."""
        with self._lock:
            self._state = now

    def offsets_sampled(self, offsets: Mapping[Partition, PartitionOffsets]) -> None:
        """Where each held partition stands, its lag too (the operations ticker's
        sample; the observers' ``lag_sampled`` is the same sample's lags)."""
        with self._lock:
            self._offsets = dict(offsets)

    # --- the page's view --------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The page's data, plain JSON types: ``now`` (wall clock, s), ``started``,
        ``totals``, ``series`` (one point per whole second of the last ``WINDOW_S``,
        oldest first: ``t`` and each count, ``commit_p50_ms`` / ``commit_max_ms`` and
        ``phases_ms``, None where no transaction committed), ``commit_p50_ms`` (over the
        last ``RECENT_S`` seconds, None without a commit), ``partitions`` (held, with
        their ``lag``, ``committed``, ``position`` and ``last_stable`` at the last sample,
        None before one), ``late`` (each window's late records since the start),
        ``restoring`` (at the last sample: topic, partition, store, applied, towards,
        seconds), ``stores`` (at the last sample: topic, partition, store, keys, bytes,
        windows, oldest_ms, stream_time_ms) and ``events``."""
        now = self._clock()
        last = int(now) - 1  # the last whole second
        with self._lock:
            if self._newest is not None and self._newest.t <= last:
                self._close(last + 1)
            first = max(int(self._started), last - WINDOW_S + 1)
            seconds = self._seconds
            series = [seconds.get(t) or _Second(t).summed_up() for t in range(first, last + 1)]
            recent = [ms for at, ms in self._recent if at >= now - RECENT_S]
            partitions = [_standing(p, self._offsets.get(p)) for p in sorted(self._held)]
            totals, events, late = dict(self._totals), list(self._events), dict(self._late)
            state = self._state
        return {
            "now": now,
            "started": self._started,
            "totals": totals,
            "series": series,
            "commit_p50_ms": statistics.median(recent) if recent else None,
            "partitions": partitions,
            "late": [{"window": w, "records": n} for w, n in sorted(late.items())],
            "restoring": [_row(r) for r in sorted(state.restoring)],
            "stores": [_row(s) for s in state.stores],
            "events": events,
        }

    def _second(self, now: float) -> _Second:
        t = int(now)
        newest = self._newest
        if newest is None or newest.t != t:
            if newest is not None:
                self._close(t)
            newest = self._newest = _Second(t)
        return newest

    def _close(self, t: int) -> None:
        """Sum up the newest second (``t`` has begun) and forget what left the window."""
        assert self._newest is not None
        self._seconds[self._newest.t] = self._newest.summed_up()
        self._newest = None
        for old in [s for s in self._seconds if s <= t - WINDOW_S - 1]:
            del self._seconds[old]

    def _event(self, now: float, kind: str, text: str) -> None:
        if len(text) > TEXT_MAX:
            text = text[: TEXT_MAX - 1] + "\u2026"
        self._events.append({"at": now, "kind": kind, "text": text})


def _standing(p: Partition, at: PartitionOffsets | None) -> dict[str, Any]:
    """A held partition's row: its offsets and lag at the last sample (None before one)."""
    row: dict[str, Any] = {"topic": p[0], "partition": p[1]}
    row.update(committed=None, position=None, last_stable=None, lag=None)
    if at is not None:
        row.update(at._asdict())
    return row


def _row(r: RestoreProgress | StoreSize) -> dict[str, Any]:
    (topic, partition), rest = r.partition, r._asdict()
    del rest["partition"]
    return {"topic": topic, "partition": partition, **rest}


def _named(partitions: frozenset[Partition]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(partitions)) or "none"
