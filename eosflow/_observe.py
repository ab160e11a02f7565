"""``Observer``: what a running app tells whoever watches it, one call per event.

The runtime calls its observers at a handful of points, never per record:

- ``transaction_ended``: once per transaction, with a ``TransactionReport`` (outcome, why
  it did not commit, its records, outputs and dead letters, the timing of each commit
  phase). Everything about transactions -- counters, commit latency, traces, the
  progress line -- is derived from these reports;
- ``partitions_assigned`` / ``partitions_revoked``: a rebalance gave or took partitions;
- ``producer_reinitialised``: the producer was replaced (KIP-360 recovery), and why;
- ``work_dropped``: records processed ahead while a commit was in flight were dropped,
  because that commit did not succeed or partitions moved (``process_ahead``; they are
  processed again);
- ``spark_job``: a Spark job of a transaction ended (``SparkJobReport``);
- ``lag_sampled``: each partition's lag against its last stable offset, sampled by the
  app's operations task (about once a second, when one runs).

``Stats``, the Prometheus metrics, the health probes, the progress log and tracing are
all observers; an embedding app can pass its own (``EosApp(..., observers=[...])``).

Failure mode: an observer runs inline on the event loop, so it must be quick and must not
block. One that raises is logged once and dropped from the fan-out -- watching the app
never stops it. Reports are after the fact: an observer that builds spans gives them
their recorded times, so nothing in the loop waits on an observer.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._records import Partition

log = logging.getLogger("eosflow.observe")


class Outcome(enum.Enum):
    """How a transaction ended."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    RECOVERED = "unknown-then-recovered"  # EndTxn outcome unknown; producer re-initialised
    EMPTY = "empty"  # no transaction was open


class AbortReason(enum.Enum):
    """Why a transaction did not commit, as a bounded set (a metric label, a span
    attribute); the words of each case stay in ``Abort.detail``."""

    REVOKED = "revoked"  # its partitions moved (or were lost) since its records were polled
    FENCED = "fenced"  # the group fenced the member (KIP-447: an old generation or member)
    HEARTBEAT_FAILED = "heartbeat_failed"  # the forced heartbeat did not confirm membership
    OFFSET_COMMIT_FAILED = "offset_commit_failed"  # TxnOffsetCommit refused or unanswered
    PRODUCE_FAILED = "produce_failed"  # an output or changelog write refused or failed
    PROCESSING_ERROR = "processing_error"  # the processor raised (retriable or not)
    TIMEOUT = "timeout"  # the broker timed the transaction out (epoch bumped; KIP-360)
    UNKNOWN_OUTCOME = "unknown_outcome"  # EndTxn unanswered: recovered (KIP-360)
    BROKER_ERROR = "broker_error"  # a poll or a step met a broker or network failure
    DATABASE_ERROR = "database_error"  # a sink's database write failed (PostgresSink)
    STOPPED = "stopped"  # the app stopped, was cancelled or failed with it open


@dataclass(frozen=True, slots=True)
class Abort:
    """Why a transaction aborts: its ``reason`` and the words of the case."""

    reason: AbortReason
    detail: str

    def __str__(self) -> str:
        return self.detail


PHASES = ("flush", "offsets", "heartbeat", "end_txn")
"""The steps of ``TransactSession.end``, timed in each ``Transaction.phases``: flush (the
outputs and the changelog writes answered), offsets (AddOffsetsToTxn + TxnOffsetCommit;
sent while the flush waits, so the two overlap), heartbeat (the forced one), end_txn
(EndTxn, or its recovery)."""


@dataclass(frozen=True, slots=True)
class TransactionReport:
    """One ended transaction. ``reason`` and ``detail`` say why it did not commit (None
    when it did). ``phases`` holds (name, start, end) on the ``time.monotonic`` clock,
    one per commit step that ran (``PHASES``), in the order they began (flush and
    offsets overlap); ``started`` is on that clock
    too and ``started_at`` on the wall clock (``time.time``)."""

    outcome: Outcome
    reason: AbortReason | None
    detail: str | None
    records: int
    outputs: int
    dead_lettered: int
    started: float
    started_at: float
    ended: float
    phases: tuple[tuple[str, float, float], ...] = ()
    partitions: tuple[Partition, ...] = ()
    undecodable: int = 0  # of ``dead_lettered``: records that did not decode (``DecodeError``)

    @property
    def duration_s(self) -> float:
        return self.ended - self.started


@dataclass(frozen=True, slots=True)
class SparkJobReport:
    """One Spark job of a transaction: its duration, rows in and whether it was
    cancelled past its budget. ``started`` is on the ``time.monotonic`` clock."""

    started: float
    ended: float
    rows: int
    cancelled: bool = False

    @property
    def duration_s(self) -> float:
        return self.ended - self.started


class Observer:
    """Watches a running app: override the events wanted (each does nothing here).
    Called on the event loop; keep each call short and never block."""

    def transaction_ended(self, report: TransactionReport) -> None:
        """A transaction committed, aborted or was recovered."""

    def partitions_assigned(self, partitions: frozenset[Partition]) -> None:
        """A rebalance gave this instance ``partitions`` (set up, about to be processed)."""

    def partitions_revoked(self, partitions: frozenset[Partition]) -> None:
        """A rebalance took ``partitions`` away."""

    def producer_reinitialised(self, reason: AbortReason) -> None:
        """The transactional producer was replaced after ``reason`` (KIP-360)."""

    def work_dropped(self, records: int) -> None:
        """``records`` processed ahead of the next transaction were dropped, to be
        processed again (``process_ahead``: the commit in flight did not succeed, or
        partitions moved)."""

    def late_records(self, window: str, records: int) -> None:
        """A committed transaction left ``records`` late records out of the windowed store
        ``window`` (each of their windows had closed; no dead-letter topic is set)."""

    def spark_job(self, report: SparkJobReport) -> None:
        """A Spark job of a transaction ended."""

    def lag_sampled(self, lag: Mapping[Partition, int]) -> None:
        """Each held partition's lag: its last stable offset minus its committed offset."""


@dataclass
class Stats(Observer):
    """Counters of a running app, kept from its reports (they only grow). ``records``,
    ``outputs`` and ``dead_lettered`` count the work of every ended transaction, so work
    redone after an abort counts again."""

    records: int = 0
    outputs: int = 0
    committed: int = 0
    aborted: int = 0
    recovered: int = 0
    dead_lettered: int = 0
    undecodable: int = 0  # of those, records that did not decode as their topic declares
    # processed ahead while a commit was in flight, then dropped because that commit did
    # not succeed or partitions moved (they are processed again)
    dropped_ahead: int = 0
    late: int = 0  # records left out of windows that had closed (committed), all windows

    def transaction_ended(self, report: TransactionReport) -> None:
        self.records += report.records
        self.outputs += report.outputs
        self.dead_lettered += report.dead_lettered
        self.undecodable += report.undecodable
        if report.outcome is Outcome.COMMITTED:
            self.committed += 1
        elif report.outcome is Outcome.ABORTED:
            self.aborted += 1
        elif report.outcome is Outcome.RECOVERED:
            self.recovered += 1

    def work_dropped(self, records: int) -> None:
        self.dropped_ahead += records

    def late_records(self, window: str, records: int) -> None:
        self.late += records


@dataclass(eq=False)
class Observers(Observer):
    """The fan-out the runtime calls: every observer in turn; one that raises is logged
    and dropped."""

    members: list[Observer] = field(default_factory=list)

    def add(self, *observers: Observer) -> None:
        self.members.extend(observers)

    def _each(self, event: str, *args: object) -> None:
        for member in tuple(self.members):
            try:
                getattr(member, event)(*args)
            except Exception:
                log.exception("observer %r failed on %s; dropped", member, event)
                self.members.remove(member)

    def transaction_ended(self, report: TransactionReport) -> None:
        self._each("transaction_ended", report)

    def partitions_assigned(self, partitions: frozenset[Partition]) -> None:
        self._each("partitions_assigned", partitions)

    def partitions_revoked(self, partitions: frozenset[Partition]) -> None:
        self._each("partitions_revoked", partitions)

    def producer_reinitialised(self, reason: AbortReason) -> None:
        self._each("producer_reinitialised", reason)

    def work_dropped(self, records: int) -> None:
        self._each("work_dropped", records)

    def late_records(self, window: str, records: int) -> None:
        self._each("late_records", window, records)

    def spark_job(self, report: SparkJobReport) -> None:
        self._each("spark_job", report)

    def lag_sampled(self, lag: Mapping[Partition, int]) -> None:
        self._each("lag_sampled", lag)
