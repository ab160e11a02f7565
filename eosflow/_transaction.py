"""``Transaction``: what one open Kafka transaction holds, replaced whole each time.

``TransactSession.begin`` creates one and ``end`` consumes it: "in a transaction" means
one exists. It holds its deadline (when it stops taking records: the commit interval
from its start), the next offset consumed per partition, the send futures of its
outputs, whether a send was refused, and why it is doomed if it is.

It is tied to the assignment under which its records were polled: ``epoch`` is the
session's assignment epoch at that moment (bumped by every revocation, assignment and
recovery) and ``identity`` the group generation and member id captured when those
partitions were assigned. A transaction whose epoch is no longer the session's can only
abort -- whether the revocation came while it was open or before it formally began (the
gap between polling and ``begin``, which aiokafka's ``begin_transaction`` widens by
always yielding). Its offsets are committed under ``identity``, not under the consumer's
generation at commit time, so the broker's KIP-447 fence rejects them too if they are
stale.

Offsets only grow: marking a partition's next offset at or below what this transaction
already marked, or at or below what is committed, would commit a position that re-reads or
skips records; it is a ``FatalError`` (a bug, never a condition to retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from ._aiokafka import GroupIdentity
from ._errors import FatalError

Partition = tuple[str, int]
"""(topic, partition): the one shape of a partition key from poll to commit."""


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
outputs and the changelog writes answered), offsets (AddOffsetsToTxn + TxnOffsetCommit),
heartbeat (the forced one), end_txn (EndTxn, or its recovery)."""


@dataclass(eq=False, slots=True)
class Transaction:
    epoch: int
    identity: GroupIdentity | None
    deadline: float  # time.monotonic() past which it takes no more records
    consumed: dict[Partition, int] = field(default_factory=dict)
    sends: list[asyncio.Future[object]] = field(default_factory=list)
    doomed: Abort | None = None
    refused: bool = False  # the producer refused a send: the rest were dropped
    fatal: FatalError | None = None  # raised by ``end`` once the transaction is aborted
    # what observers are told when it ends (``TransactionReport``)
    started: float = field(default_factory=time.monotonic)
    started_at: float = field(default_factory=time.time)  # wall clock, for traces
    records: int = 0
    outputs: int = 0
    dead_lettered: int = 0
    phases: list[tuple[str, float, float]] = field(default_factory=list)  # name, start, end

    def doom(self, reason: AbortReason, detail: str) -> None:
        """Make the transaction abort at ``end``; the first reason is kept."""
        if self.doomed is None:
            self.doomed = Abort(reason, detail)

    def time_left_s(self, timeout_s: float) -> float:
        """What is left of ``timeout_s`` (the transaction timeout) since it began: how
        long its outputs may still wait to be queued (``_produce``) before it is doomed."""
        return max(0.0, self.started + timeout_s - time.monotonic())

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time one step of ``end`` (one of ``PHASES``), whatever its outcome."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.phases.append((name, start, time.monotonic()))

    def mark(
        self, offsets: Mapping[Partition, int], committed: Mapping[Partition, int | None]
    ) -> None:
        """Record the next offset per partition processed in this transaction."""
        for tp, offset in offsets.items():
            ours = self.consumed.get(tp)
            floor = ours if ours is not None else committed.get(tp)
            if floor is not None and offset <= floor:
                where = (
                    "what this transaction marked" if ours is not None else "its committed offset"
                )
                raise FatalError(
                    f"the next offset of {tp[0]}[{tp[1]}] would be {offset}, not past {where} "
                    f"({floor}): records would be committed twice"
                )
        self.consumed.update(offsets)
