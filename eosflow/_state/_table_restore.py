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

Progress is logged every ``_REPORT_EVERY_S`` on long restores.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import EosflowError, FatalError, TransientError
from .._records import Partition
from ._local import Checkpoint, LocalPartition
from ._store import RESERVED_KEY

log = logging.getLogger("eosflow.state")

_REPORT_EVERY_S = 5.0
_POLL_MS = 100
_MAX_RECORDS = 20_000


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


class TableRestorer:
    def __init__(
        self,
        config: EosConfig,
        on_ready: Callable[[Partition], None],
        on_failed: Callable[[Exception], None],
        wait_s: float,
    ) -> None:
        self.config = config
        self._on_ready, self._on_failed, self._wait_s = on_ready, on_failed, wait_s
        self._jobs: dict[Partition, TableJob] = {}
        self._soon: dict[Partition, TableJob] = {}  # ready at once, told on the next turn
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._closed = False

    def add(self, job: TableJob) -> None:
        """Restore ``job`` (replacing one of the same partition); ready at once when the
        local copy is already at the committed offset."""
        if self._closed:
            return
        self.remove([job.partition])
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
        if job.committed is None or job.next >= job.committed:
            # ready, but never from within add(): its caller holds the partition back
            # after this returns (a recovery, an assignment), and a release before
            # that would leave it held forever
            self._soon[job.partition] = job
            asyncio.get_running_loop().call_soon(self._ready_now, job)
            return
        self._jobs[job.partition] = job
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="eosflow-table-restore")

    def _ready_now(self, job: TableJob) -> None:
        if self._soon.get(job.partition) is job:  # not removed or replaced meanwhile
            del self._soon[job.partition]
            self._on_ready(job.partition)

    def remove(self, partitions: list[Partition]) -> None:
        for partition in partitions:
            self._soon.pop(partition, None)
            if self._jobs.pop(partition, None) is not None:
                self._changed.set()

    async def stop(self) -> None:
        self._closed = True
        self._jobs.clear()
        self._soon.clear()
        task, self._task = self._task, None
        try:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise asyncio.CancelledError  # our own cancellation, not the task's
        finally:
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                await ak.close_consumer(consumer, timeout_s=10.0)

    async def _run(self) -> None:
        failing_since: float | None = None
        backoff = self.config.retry_backoff_s
        while self._jobs:
            try:
                consumer = await self._client()
                if self._changed.is_set():
                    self._changed.clear()
                    await self._assign(consumer)
                with ak.mapped("restoring a table (fetching its topic)", "READ"):
                    batch = await consumer.getmany(timeout_ms=_POLL_MS, max_records=_MAX_RECORDS)
                for tp, msgs in batch.items():
                    job = self._jobs.get((tp.topic, tp.partition))
                    if job is not None and job.assigned and msgs:
                        self._apply(job, msgs)
                for job in list(self._jobs.values()):
                    self._check(consumer, job)
                failing_since, backoff = None, self.config.retry_backoff_s
            except asyncio.CancelledError:
                raise
            except TransientError as exc:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self._wait_s:
                    self._fail(exc)
                    return
                log.warning("restoring a table: %s; retrying", exc)
                self._changed.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.retry_backoff_max_s)
            except EosflowError as exc:
                self._fail(exc)
                return
            except Exception as exc:  # the boundary: nothing else leaves the task unseen
                self._fail(ak.map_error(exc, "restoring a table"))
                return
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._consumer.assign([])

    def _fail(self, exc: Exception) -> None:
        failed = sorted(f"{t}[{p}]" for t, p in self._jobs)
        self._jobs.clear()
        log.error("restoring the tables of %s failed: %s", ", ".join(failed), exc)
        self._on_failed(exc)

    async def _client(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            self._consumer = await ak.state_reader(self.config, "tables", _POLL_MS)
        return self._consumer

    async def _assign(self, consumer: AIOKafkaConsumer) -> None:
        """Assign every job's partition, each at its next offset (an assign forgets
        every position)."""
        jobs = list(self._jobs.values())
        with ak.mapped("restoring a table (positioning its topic)", "READ"):
            consumer.assign([TopicPartition(*job.partition) for job in jobs])
            for job in jobs:
                tp = TopicPartition(*job.partition)
                if job.next > 0:
                    consumer.seek(tp, job.next)
                else:
                    await consumer.seek_to_beginning(tp)
                job.assigned = True

    def _apply(self, job: TableJob, msgs: list[object]) -> None:
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

    def _check(self, consumer: AIOKafkaConsumer, job: TableJob) -> None:
        if not job.assigned or job.committed is None:
            return
        tp = TopicPartition(*job.partition)
        ends = ak.log_position(consumer, tp)  # never awaits (a reset may hang in an outage)
        if ends is None:
            return  # not fetched yet
        stable, position = ends
        if position is None:
            return
        now = time.monotonic()
        if position >= job.committed:
            if job.next < job.committed:  # markers or aborted records up to it
                job.next = job.committed
                job.local.apply({}, {job.store: at(job.next)})
            self.remove([job.partition])
            topic, p = job.partition
            log.info(
                "restored table %r of %s[%d]: %d records in %.1f s",
                job.store,
                topic,
                p,
                job.applied,
                now - job.started,
            )
            self._on_ready(job.partition)
            return
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
        if now - job.reported >= _REPORT_EVERY_S:
            job.reported = now
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
