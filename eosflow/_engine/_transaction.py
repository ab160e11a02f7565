"""``Transaction``: what one open Kafka transaction holds, replaced whole each time.

``TransactSession.begin`` creates one and ``end`` consumes it: "in a transaction" means
one exists. It holds its deadline (when it stops taking records: the commit interval
from its start), the next offset consumed per partition, the send futures of its
outputs, the outputs of folded topics held back until its end (the last per key),
whether a send was refused, and why it is doomed if it is.

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

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .._aiokafka import GroupIdentity, Sends
from .._errors import FatalError
from .._observe import Abort, AbortReason, Outcome, TransactionReport
from .._records import Output, Partition


@dataclass(eq=False, slots=True)
class Transaction:
    epoch: int
    identity: GroupIdentity | None
    deadline: float  # time.monotonic() past which it takes no more records
    consumed: dict[Partition, int] = field(default_factory=dict)
    touched: set[Partition] = field(default_factory=set)  # consumed, but no record of them
    sends: Sends = field(default_factory=Sends)  # its batches, some joinable (_produce)
    # outputs of folded topics, the last per (topic, partition, key): sent at ``end``
    held: dict[tuple[str, int | None, object], Output] = field(default_factory=dict)
    doomed: Abort | None = None
    refused: bool = False  # the producer refused a send: the rest were dropped
    sealed: bool = False  # takes no more records (``seal``): what is polled is work ahead
    fatal: FatalError | None = None  # raised by ``end`` once the transaction is aborted
    # what observers are told when it ends (``TransactionReport``)
    started: float = field(default_factory=time.monotonic)
    started_at: float = field(default_factory=time.time)  # wall clock, for traces
    records: int = 0
    outputs: int = 0
    dead_lettered: int = 0
    undecodable: int = 0  # of those, records that did not decode
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
        self.touched.difference_update(offsets)

    def touch(self, partition: Partition, committed: int | None) -> bool:
        """``partition``'s state changes in this transaction without a record of it (a
        wall-clock timer fires): its committed offset is committed again with it, so a
        zombie's commit is refused by the group (KIP-447) as for records; it is
        ``touched`` (its changelog gets the writes, no position record: they only grow).
        False -- leave it alone -- without a committed offset."""
        if partition not in self.consumed:
            if committed is None:
                return False
            self.consumed[partition] = committed
            self.touched.add(partition)
        return True


def report_of(
    txn: Transaction, outcome: Outcome, why: Abort | None, ended: float
) -> TransactionReport:
    """The report observers get of ``txn``, ended with ``outcome`` (``why``: the reason
    it did not commit; when cut short, the first reason it was doomed for)."""
    committed = outcome is Outcome.COMMITTED
    if not committed and why is None:
        why = txn.doomed or Abort(AbortReason.UNKNOWN_OUTCOME, "the outcome is unknown")
    return TransactionReport(
        outcome=outcome,
        reason=None if committed or why is None else why.reason,
        detail=None if committed or why is None else why.detail,
        records=txn.records,
        outputs=txn.outputs,
        dead_lettered=txn.dead_lettered,
        started=txn.started,
        started_at=txn.started_at,
        ended=ended,
        phases=tuple(sorted(txn.phases, key=lambda ph: ph[1])),  # in the order they began
        partitions=tuple(txn.consumed),
        undecodable=txn.undecodable,
    )
