"""``TableRestorer``: brings a table partition's local copy to the group's committed
offset of that partition, from the table topic itself (tables have no changelog).

A job is one table partition (``_tables``): it stays paused and unprocessed until the
job is done, and its stream partitions wait for it (``_sync``). One task and one
read_committed consumer serve every job, so a rebalance never waits for a long restore.

1. **The checkpoint says how far the local copy reflects the topic**: the next table
   offset it has applied (written with the data, in one atomic batch, by a commit or by
   this restore). A copy ahead of the committed offset (a transaction that did not
   commit reached it, or the group's offsets went back) is wiped, as is any copy when
   the group has no committed offset (the group consumes the topic from the reset
   policy's end, into an empty table).
2. **Read committed records from the checkpoint up to the committed offset** and apply
   them (a None value deletes), never one at or past it: those belong to transactions
   this instance will process. A record below the committed offset was read by the
   previous owner, so it is decided and readable.
3. **Done when the consumer's position reaches the committed offset.** Should it stay
   behind for ``wait_s`` with nothing left to read (the topic recreated, or truncated
   below the offset) the app stops with one line.

Progress is logged every few seconds on long restores. The one task, the consumer, the
loop, retries and the jobs' bookkeeping are ``_restoring``'s (shared with the store
restore); a job is its own target (its one partition).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition

from .. import _aiokafka as ak
from .._errors import FatalError
from .._records import Partition, RestoreProgress
from ._local import Checkpoint, LocalPartition
from ._restoring import Restoring, Words, report_due
from ._settings import StateSettings
from ._store import RESERVED_KEY

log = logging.getLogger("eosflow.state")

_WORDS = Words(
    step="restoring a table",
    fetching="restoring a table (fetching its topic)",
    positioning="restoring a table (positioning its topic)",
    what="tables",
    role="tables",
    task="eosflow-table-restore",
)


def at(offset: int) -> Checkpoint:
    """A table's checkpoint: ``offset`` is the next table record to apply."""
    return Checkpoint(offset, -1, offset)


@dataclass(eq=False)
class TableJob:
    partition: Partition  # the table topic's partition
    local: LocalPartition
    store: str
    committed: int | None
    next: int = 0  # the next table offset to apply
    assigned: bool = False
    applied: int = 0
    started: float = field(default_factory=time.monotonic)
    reported: float = field(default_factory=time.monotonic)
    stuck_since: float | None = None
    done: bool = False  # at the committed offset (and no longer restoring)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(*self.partition)


class TableRestorer:
    """The table restore: ``_restoring.Kind`` for ``Restoring``, which runs it."""

    def __init__(
        self,
        config: StateSettings,
        on_ready: Callable[[Partition], None],
        on_failed: Callable[[Exception], None],
        wait_s: float,
    ) -> None:
        self.config = config
        self._wait_s = wait_s
        self._restoring: Restoring[TableJob, TableJob] = Restoring(
            config, self, _WORDS, on_ready, on_failed, wait_s
        )

    def progress(self) -> list[RestoreProgress]:
        """Each table partition restoring: rows applied, towards the committed offset."""
        now = time.monotonic()
        return [
            RestoreProgress(j.partition, j.store, j.applied, j.committed, now - j.started)
            for j in self._restoring.jobs.values()
        ]

    def add(self, job: TableJob) -> None:
        """Restore ``job`` (replacing one of the same partition); ready at once when the
        local copy is already at the committed offset."""

        def prepare() -> bool:
            cp = job.local.checkpoint(job.store)
            if job.committed is None or cp.offset > job.committed:
                if cp.offset > 0:
                    topic, p = job.partition
                    log.info(
                        "table %r of %s[%d]: the local copy (at %d) is past the committed "
                        "offset (%s): rebuilt from the topic",
                        job.store,
                        topic,
                        p,
                        cp.offset,
                        job.committed,
                    )
                    job.local.wipe(job.store)
                cp = at(0)
            job.next = cp.offset
            return job.committed is None or job.next >= job.committed

        self._restoring.add(job, prepare)

    def remove(self, partitions: list[Partition]) -> None:
        self._restoring.remove(partitions)

    async def stop(self) -> None:
        await self._restoring.stop()

    # --- what the loop asks (``_restoring.Kind``) -------------------------------------

    def targets(self, job: TableJob) -> Sequence[TableJob]:
        return (job,)

    def offset(self, job: TableJob, target: TableJob) -> int:
        return job.next

    async def positioned(self, consumer: AIOKafkaConsumer, targets: list[TableJob]) -> None:
        """Nothing more: the last stable offset comes with the fetches (``check``)."""

    async def apply(
        self, consumer: AIOKafkaConsumer, job: TableJob, target: TableJob, msgs: list[object]
    ) -> None:
        """``msgs`` below the committed offset into the local copy, with the checkpoint
        after the last, in one batch."""
        assert job.committed is not None
        changes: dict[bytes, bytes | None] = {}
        last = -1
        for m in msgs:
            offset: int = m.offset  # type: ignore[attr-defined]
            if offset >= job.committed:
                break
            key = m.key  # type: ignore[attr-defined]
            if key is not None and key != RESERVED_KEY:
                changes[key] = m.value  # type: ignore[attr-defined]
            last = offset
        if last < 0:
            return
        job.next = last + 1
        job.local.apply({job.store: changes}, {job.store: at(job.next)})
        job.applied += len(changes)

    async def check(self, consumer: AIOKafkaConsumer, job: TableJob) -> bool:
        if not job.assigned or job.committed is None:
            return False
        ends = ak.log_position(consumer, job.tp)  # never awaits (a reset may hang in an outage)
        if ends is None:
            return False  # not fetched yet
        stable, position = ends
        if position is None:
            return False
        now = time.monotonic()
        if position >= job.committed:
            if job.next < job.committed:  # markers or aborted records up to it
                job.next = job.committed
                job.local.apply({}, {job.store: at(job.next)})
            job.done = True
            topic, p = job.partition
            log.info(
                "restored table %r of %s[%d]: %d records in %.1f s",
                job.store,
                topic,
                p,
                job.applied,
                now - job.started,
            )
            return True
        if position >= stable:  # all there is, short of the offset
            job.stuck_since = job.stuck_since or now
            if now - job.stuck_since > self._wait_s:
                topic, p = job.partition
                raise FatalError(
                    f"restoring table {job.store!r} of {topic}[{p}]: the topic ends at "
                    f"{position} but the group committed offset {job.committed} (was the "
                    "topic recreated or truncated?)"
                )
        else:
            job.stuck_since = None
        if report_due(job, now):
            topic, p = job.partition
            log.info(
                "restoring table %r of %s[%d]: %d records applied, at %d of %d",
                job.store,
                topic,
                p,
                job.applied,
                position,
                job.committed,
            )
        return False
