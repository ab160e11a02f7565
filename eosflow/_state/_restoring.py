"""``Restoring``: the mechanism both restorers run -- a store's changelog restore
(``_restore``) and a table's restore from its topic (``_table_restore``).

A **job** is one partition held back until its local copy is restored (``on_ready``);
its **targets** are the topic partitions it reads (one per store changelog, or the
table's partition itself). ``Restoring`` owns what does not depend on what is read:

- the jobs, each replacing one of the same partition, and their targets by topic
  partition; ``remove`` drops a job (its partition revoked) and nothing else;
- **one task and one read_committed consumer for every job**, so a long restore never
  blocks a rebalance or the group's heartbeats. The cost: a change to the jobs assigns
  the consumer again, and an assign forgets every position, so every target is
  positioned again (``Kind.offset``) and its fetched buffer read again;
- the loop: assign when the jobs changed, fetch, hand each target its records
  (``Kind.apply``), ask each job whether it is done (``Kind.check``), tell the done
  ones ``on_ready``. A fetch that was under way when its job was replaced brought
  records from the old job's position: the new target is not positioned yet
  (``assigned``) and they are dropped -- applied, they would land after a wipe the new
  job did (a compacted changelog's keys before that fetch lost);
- failures: a ``TransientError`` is retried with a growing backoff and every target is
  positioned again from where its local copy is (the consumer's positions may be
  anywhere after a failed fetch); one that goes on for ``wait_s``, or any other error,
  fails every job (``on_failed``), logged once;
- ready at once (``add``'s ``prepare`` says the copy is restored already): told on the
  next loop turn, never from within ``add()`` -- its caller holds the partition back
  after ``add`` returns (a recovery, an assignment), and a release before that would
  leave it held forever;
- idle (no job left, or failed): the consumer is unassigned, so it stops fetching
  topics whose records would only pile up in its buffer; ``stop`` cancels the task and
  closes the consumer, and no restore starts after it.

What a restorer supplies (``Kind``): where a target reads next, how fetched records
are applied, when a job is done (and what it logs then). The failure mode to keep in
mind: ``Kind.offset`` must say where the local copy *is* (what was applied with its
checkpoint), as it is asked again after every failure and every change to the jobs --
ahead of the copy, records are skipped (state lost); behind it, records are applied
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition

from .. import _aiokafka as ak
from .._errors import EosflowError, TransientError
from .._records import Partition
from ._settings import StateSettings

log = logging.getLogger("eosflow.state")

_REPORT_EVERY_S = 5.0  # a long restore's progress is logged this often
_POLL_MS = 100
_MAX_RECORDS = 20_000


class Job(Protocol):
    """What ``Restoring`` reads of a job: the partition it holds back, when its
    progress was last logged."""

    @property
    def partition(self) -> Partition: ...

    reported: float


class Target(Protocol):
    """What ``Restoring`` reads and keeps of a target."""

    @property
    def tp(self) -> TopicPartition: ...

    assigned: bool  # to the restore consumer, and positioned: its fetched records count
    done: bool  # read far enough: left out of the next assign


J = TypeVar("J", bound=Job)
T = TypeVar("T", bound=Target)
J_contra = TypeVar("J_contra", bound=Job, contravariant=True)


class Kind(Protocol[J_contra, T]):
    """What a restorer supplies: everything that depends on what is read."""

    def targets(self, job: J_contra) -> Sequence[T]:
        """``job``'s targets (fixed once ``add``'s ``prepare`` returned)."""
        ...

    def offset(self, job: J_contra, target: T) -> int:
        """Where ``target`` reads next, from its local copy (0 or less: the start)."""
        ...

    async def positioned(self, consumer: AIOKafkaConsumer, targets: list[T]) -> None:
        """After an assign put ``targets`` where they read (within its error mapping)."""
        ...

    async def apply(
        self, consumer: AIOKafkaConsumer, job: J_contra, target: T, msgs: list[object]
    ) -> None:
        """Apply ``target``'s fetched records (never empty) to ``job``'s local copy."""
        ...

    async def check(self, consumer: AIOKafkaConsumer, job: J_contra) -> bool:
        """Whether ``job`` is done: every record its partition needs is in the local copy
        (its final line logged). True lets the partition be processed (``on_ready``):
        early, its state misses writes. Raise to fail every job."""
        ...


@dataclass(frozen=True)
class Words:
    """What a restorer's logs, errors and clients are called."""

    step: str  # what a mapped error and the retry warning say was going on
    fetching: str  # the fetch's step
    positioning: str  # the assign's step
    what: str  # "restoring the <what> of in[0] failed"
    role: str  # the consumer's client id is ``<client_id>-<role>``
    task: str  # the task's name


def report_due(job: Job, now: float) -> bool:
    """Whether a long restore's progress is to be logged now (every ``_REPORT_EVERY_S``);
    if so, it counts as logged."""
    if now - job.reported < _REPORT_EVERY_S:
        return False
    job.reported = now
    return True


class Restoring(Generic[J, T]):
    """The mechanism (the module's docstring) for the jobs of one restorer, ``kind``."""

    def __init__(
        self,
        config: StateSettings,
        kind: Kind[J, T],
        words: Words,
        on_ready: Callable[[Partition], None],
        on_failed: Callable[[Exception], None],
        wait_s: float,
    ) -> None:
        self.config, self.wait_s = config, wait_s
        self._kind, self._words = kind, words
        self._on_ready, self._on_failed = on_ready, on_failed
        self.jobs: dict[Partition, J] = {}
        self._by_tp: dict[TopicPartition, tuple[J, T]] = {}
        self._soon: dict[Partition, J] = {}  # ready at once, told on the next turn
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self.closed = False

    def current(self, job: J) -> bool:
        """Whether ``job`` is still restoring (not removed, replaced or failed)."""
        return self.jobs.get(job.partition) is job

    def found(self, tp: TopicPartition) -> tuple[J, T] | None:
        """The job restoring ``tp`` and its target there, if any."""
        return self._by_tp.get(tp)

    def add(self, job: J, prepare: Callable[[], bool]) -> None:
        """Restore ``job``, replacing a job of the same partition. ``prepare`` makes it
        ready to run (its targets, a wipe of what cannot be trusted) and says whether the
        local copy is restored already: then ``on_ready`` on the next loop turn."""
        if self.closed:
            return  # stopped: a rebalance that ends after the stop restores nothing
        self.remove([job.partition])
        if prepare():
            # ready, but never from within add(): its caller holds the partition back
            # after this returns (a recovery, an assignment), and a release before
            # that would leave it held forever
            self._soon[job.partition] = job
            asyncio.get_running_loop().call_soon(self._ready_now, job)
            return
        for t in self._kind.targets(job):
            self._by_tp[t.tp] = (job, t)
        self.jobs[job.partition] = job
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=self._words.task)

    def _ready_now(self, job: J) -> None:
        if self._soon.get(job.partition) is job:  # not removed or replaced meanwhile
            del self._soon[job.partition]
            self._on_ready(job.partition)

    def remove(self, partitions: list[Partition]) -> None:
        for partition in partitions:
            self._soon.pop(partition, None)
            job = self.jobs.pop(partition, None)
            if job is not None:
                for t in self._kind.targets(job):
                    self._by_tp.pop(t.tp, None)
                self._changed.set()

    async def stop(self) -> None:
        self.closed = True
        self.jobs.clear()
        self._by_tp.clear()
        self._soon.clear()
        task, self._task = self._task, None
        try:
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise  # our own cancellation, not the task's
                except Exception as exc:
                    log.debug("the %s task ended on %r while stopping", self._words.role, exc)
        finally:
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                await ak.close_consumer(consumer, timeout_s=10.0)

    # --- the one task ----------------------------------------------------------------

    async def _run(self) -> None:
        """The loop: (re)assign when jobs changed, fetch, apply, check. A broker failure
        is retried with a growing backoff, every target repositioned from its local
        copy; failures that go on for ``wait_s`` fail every job."""
        words = self._words
        failing_since: float | None = None
        backoff = self.config.retry_backoff_s
        while self.jobs:
            try:
                consumer = await self._client()
                if self._changed.is_set():
                    self._changed.clear()
                    await self._assign(consumer)
                with ak.mapped(words.fetching, "READ"):
                    batch = await consumer.getmany(timeout_ms=_POLL_MS, max_records=_MAX_RECORDS)
                for tp, msgs in batch.items():
                    found = self._by_tp.get(tp)
                    # a target added (a job replaced) while this fetch ran is not yet
                    # positioned: what came is from the old position, read again later
                    if found is not None and msgs and found[1].assigned:
                        await self._kind.apply(consumer, *found, msgs)
                for job in list(self.jobs.values()):
                    # a job removed meanwhile (by a callback, during an await) is not told
                    if await self._kind.check(consumer, job) and self.current(job):
                        self.remove([job.partition])
                        self._on_ready(job.partition)
                failing_since, backoff = None, self.config.retry_backoff_s
            except asyncio.CancelledError:
                raise
            except TransientError as exc:
                now = time.monotonic()
                if failing_since is None:
                    failing_since = now
                    log.warning("%s: %s; retrying", words.step, exc)
                if now - failing_since > self.wait_s:
                    self._fail(exc)
                    return
                self._changed.set()  # reposition every target from its local copy
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.config.retry_backoff_max_s)
            except EosflowError as exc:
                self._fail(exc)
                return
            except Exception as exc:  # the boundary: nothing else leaves the task unseen
                self._fail(ak.map_error(exc, words.step))
                return
        self._idle()

    def _idle(self) -> None:
        """Nothing left to restore: stop fetching (this instance writes or consumes
        those partitions now; their records would only pile up in the buffer)."""
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._consumer.assign([])

    def _fail(self, exc: Exception) -> None:
        failed = sorted(f"{t}[{p}]" for t, p in self.jobs)
        self.jobs.clear()
        self._by_tp.clear()
        self._idle()
        log.error("restoring the %s of %s failed: %s", self._words.what, ", ".join(failed), exc)
        self._on_failed(exc)

    async def _client(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            self._consumer = await self.config.reader(self._words.role, _POLL_MS)
        return self._consumer

    async def _assign(self, consumer: AIOKafkaConsumer) -> None:
        """Assign every target not done and put each where it reads next (an assign
        forgets every position): ``Kind.offset``, or the start when that is 0."""
        active = [(job, t) for job, t in self._by_tp.values() if not t.done]
        with ak.mapped(self._words.positioning, "READ"):
            consumer.assign([t.tp for _job, t in active])
            for job, t in active:
                if self._by_tp.get(t.tp) != (job, t):
                    continue  # removed or replaced during an await of this loop
                offset = self._kind.offset(job, t)
                if offset > 0:
                    consumer.seek(t.tp, offset)
                else:
                    await consumer.seek_to_beginning(t.tp)
                t.assigned = True
            await self._kind.positioned(consumer, [t for _job, t in active])
