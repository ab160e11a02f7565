"""``Restorer``: brings the local copy of newly assigned (or recovered) store partitions
up to the committed changelog, in the background, one read_committed consumer for all.

A **job** is one input partition with every store of it; the partition stays paused and
is not processed until its job is done (``on_ready``). Jobs run in one task, so a long
restore never blocks a rebalance or the group's heartbeats, and a revoked partition's job
is simply dropped (``remove``): only the partitions that move are touched.

Per store partition (a **target**):

1. **Trust the checkpoint only if the changelog confirms it.** A local checkpoint names
   the last position record it applied (offset and input position). The target reads
   from that offset first: the record there must be a committed position record with
   the same position. Anything else -- an aborted or missing record (local data of a
   transaction that never committed), a changelog recreated or compacted past it, a
   checkpoint past the end -- wipes the local copy and restores from the changelog's
   start. With no checkpoint the restore starts at the beginning.
2. **Read committed records up to the last stable offset**, applying each fetched batch
   and the checkpoint atomically, so a kill mid-restore resumes from a consistent point.
3. **Done when the store's position equals the group's committed offset** for the input
   partition, and the restore has read past the changelog offset that offset's metadata
   names (``Job.written``: the last record the committing transaction wrote there): then
   every committed transaction's writes are in -- also one that did not move the
   position (it fired wall-clock timers), whose commit markers may land after the
   offsets were fetched. A transaction still
   open on the changelog (a zombie's, which KIP-447 fencing will abort) holds the last
   stable offset and is never read. If the position is behind the committed offset
   while a transaction is pending there, the commit markers of the previous owner's last
   transaction have not landed yet (the group coordinator saw its offsets first): wait
   for them, up to ``wait_s``, then fail. With nothing pending, a position behind the
   committed offset means either a changelog end that is not the last word -- a leader
   that has not learnt yet that another broker took its partitions over answers the
   log it holds, stable up to its old end -- or input processed without this store for
   a while. The restore reads on for up to ``transaction_timeout_s``; then it logs the
   store as one the input ran without and is done. A store with no position record at
   all (one added to a running pipeline) is done at once. Taking a stale end for the
   last word would process on from the committed offset with the state of an older
   one: each update in between lost. A position **ahead** of it stops the app (the
   group's offsets were reset behind the state) -- but only once the committed offset,
   fetched again (``refetch``, which also moves the partition there) every
   ``_REFETCH_EVERY_S``, stayed behind for ``transaction_timeout_s`` **of answers**:
   counted from the first answer since the wait began, and again from the next one
   after a refetch that failed (a membership lost, a coordinator not answering) or an
   answer that took over ``_SLOW_ANSWER_S`` (a coordinator that stalled, then answered,
   perhaps from its cache). Time without answers is no evidence, and counting it
   stopped an instance whose group coordinator was SIGSTOPped for 45 s (a CI run's
   chaos on genuine 4.4.0). An answer behind
   the state need not be the group's last word either: where offset fetches are not
   stable (a broker without KIP-447, or ``require_stable_fetch_offsets`` off), the
   previous owner's offsets may still be pending while its changelog's markers landed
   (a stalled group coordinator); where they are, a group coordinator SIGSTOPped while
   another broker took the group over answers from its cache for a moment once it runs
   again (seen on genuine 4.4.0). Processing from the older offset would count those
   records twice.

Progress is logged every few seconds on long restores. The one task, the consumer, the
loop, retries and the jobs' bookkeeping are ``_restoring``'s (shared with the table
restore): this module says where a target reads (1), what a fetched record does (1, 2)
and when a job is done (3).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition

from .. import _aiokafka as ak
from .._errors import FatalError, TransientError
from .._records import Partition, RestoreProgress
from ._changelog import decode_position
from ._local import EMPTY, Checkpoint, LocalPartition
from ._restoring import Restoring, Words, report_due
from ._settings import StateSettings
from ._store import RESERVED_KEY

log = logging.getLogger("eosflow.state")

_REFETCH_EVERY_S = 0.25  # a store ahead: how often the committed offset is asked again
_SLOW_ANSWER_S = 1.0  # a refetch answered later than this restarts the wait at its answer
_POSITIONING = "restoring state (positioning the changelog)"
_WORDS = Words(
    step="restoring state",
    fetching="restoring state (fetching the changelog)",
    positioning=_POSITIONING,
    what="stores",
    role="restore",
    task="eosflow-restore",
)


@dataclass(eq=False)
class _Target:
    store: str
    tp: TopicPartition  # its changelog partition
    checkpoint: Checkpoint
    verifying: bool  # the first record read must be the checkpoint's position record
    position: int | None
    marker: int
    lso: int = -1
    applied: int = 0
    done: bool = False
    assigned: bool = False  # to the restore consumer, and positioned
    # at a position other than the committed offset with nothing pending: since when,
    # and whether ahead of it (the offset fetched again) or behind (the changelog read on)
    unsettled_since: float | None = None
    waiting: str = ""


@dataclass(eq=False)
class Job:
    partition: Partition
    local: LocalPartition
    committed: int | None  # the group's committed offset of the input partition
    # store -> changelog offset of the last record the committed transaction wrote
    # (its offset's metadata): read past it before the store is done
    written: dict[str, int] = field(default_factory=dict)
    targets: list[_Target] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    pending_since: float | None = None
    refetch_at: float = 0.0  # the committed offset is fetched again from then on
    # a store ahead: since when refetches have been answered, promptly and without a
    # failure in between (None: not since the last failure or slow answer)
    answered_since: float | None = None
    reported: float = field(default_factory=time.monotonic)


class Restorer:
    """The store restore: ``_restoring.Kind`` for ``Restoring``, which runs it."""

    def __init__(
        self,
        config: StateSettings,
        on_ready: Callable[[Partition], None],
        on_failed: Callable[[Exception], None],
        wait_s: float,
    ) -> None:
        self.config = config
        self._wait_s = wait_s
        self._restoring: Restoring[Job, _Target] = Restoring(
            config, self, _WORDS, on_ready, on_failed, wait_s
        )
        # set by the session: a partition's committed offset and metadata fetched
        # again (the partition moved there), when a store is ahead
        self.refetch: Callable[[Partition], Awaitable[tuple[int | None, dict[str, int]]]] | None
        self.refetch = None

    @property
    def restoring(self) -> frozenset[Partition]:
        return frozenset(self._restoring.jobs)

    def progress(self) -> list[RestoreProgress]:
        """Each store of each partition restoring: records applied, the changelog's
        stable offset it reads towards (once known)."""
        now = time.monotonic()
        return [
            RestoreProgress(
                j.partition, t.store, t.applied, t.lso if t.lso >= 0 else None, now - j.started
            )
            for j in self._restoring.jobs.values()
            for t in j.targets
        ]

    def add(self, job: Job, changelogs: dict[str, str]) -> None:
        """Restore ``job`` (replacing a job of the same partition). ``changelogs``: store
        -> changelog topic."""

        def prepare() -> bool:
            _topic, p = job.partition
            for store in job.local.stores:
                cp = job.local.checkpoint(store)
                verify = cp.marker >= 0
                if cp.offset > 0 and not verify:  # data without a position record: unverifiable
                    job.local.wipe(store)
                    cp = EMPTY
                target = _Target(
                    store,
                    TopicPartition(changelogs[store], p),
                    cp,
                    verifying=verify,
                    position=cp.position,
                    marker=cp.marker,
                )
                job.targets.append(target)
            return False  # read from the changelog, always

        self._restoring.add(job, prepare)

    def remove(self, partitions: list[Partition]) -> None:
        self._restoring.remove(partitions)

    async def stop(self) -> None:
        await self._restoring.stop()

    # --- what the loop asks (``_restoring.Kind``) -------------------------------------

    def targets(self, job: Job) -> Sequence[_Target]:
        return job.targets

    def offset(self, job: Job, t: _Target) -> int:
        """A target still to verify at its checkpoint's position record, one with local
        data at its checkpoint, a fresh one at the changelog's start."""
        return t.checkpoint.marker if t.verifying else job.local.checkpoint(t.store).offset

    async def positioned(self, consumer: AIOKafkaConsumer, targets: list[_Target]) -> None:
        """A new target's last stable offset (read_committed): what it reads up to until
        its fetches give one -- at -1, a target not fetched yet would look read to its
        end (a fresh store with no committed offset: done at once)."""
        fresh = [t.tp for t in targets if t.lso < 0]
        if fresh:
            ends = await consumer.end_offsets(fresh)  # read_committed: last stable offsets
            for tp, end in ends.items():
                found = self._restoring.found(tp)  # (a job may have gone during the await)
                if found is not None:
                    found[1].lso = end

    async def apply(
        self, consumer: AIOKafkaConsumer, job: Job, t: _Target, msgs: list[object]
    ) -> None:
        first = msgs[0]
        if t.verifying:
            t.verifying = False
            if not _confirms(first, t.checkpoint):
                await self._distrust(
                    consumer,
                    job,
                    t,
                    f"the changelog at {t.checkpoint.marker} holds {_describe(first)}",
                )
                return
            msgs = msgs[1:]  # the confirmed position record is applied already
            if not msgs:
                return
        changes: dict[bytes, bytes | None] = {}
        for m in msgs:
            key = m.key  # type: ignore[attr-defined]
            if key == RESERVED_KEY:
                t.position = decode_position(m.value)  # type: ignore[attr-defined]
                t.marker = m.offset  # type: ignore[attr-defined]
            else:
                changes[key] = m.value  # type: ignore[attr-defined]
        last = msgs[-1].offset  # type: ignore[attr-defined]
        cp = Checkpoint(last + 1, t.marker, t.position)
        job.local.apply({t.store: changes}, {t.store: cp})
        t.applied += len(msgs)

    async def _distrust(self, consumer: AIOKafkaConsumer, job: Job, t: _Target, why: str) -> None:
        topic, p = job.partition
        log.warning(
            "the local copy of store %r of %s[%d] is not confirmed by the committed "
            "changelog (%s): wiped, restoring from the changelog's start",
            t.store,
            topic,
            p,
            why,
        )
        job.local.wipe(t.store)
        t.checkpoint, t.position, t.marker, t.applied = EMPTY, None, -1, 0
        with ak.mapped(_POSITIONING, "READ"):
            await consumer.seek_to_beginning(t.tp)

    async def check(self, consumer: AIOKafkaConsumer, job: Job) -> bool:
        if not all(t.assigned for t in job.targets):
            return False  # added during the fetch: assigned and positioned on the next round
        now = time.monotonic()
        waited = job.pending_since is not None and now - job.pending_since > self._wait_s
        pending = ahead = False
        for t in job.targets:
            if t.done:
                continue
            since, t.unsettled_since = t.unsettled_since, None  # kept below while unsettled
            # never awaited: aiokafka's position() waits out an offset reset, which a
            # broker outage can hold up; without a position the target is not done yet
            position = ak.position_now(consumer, t.tp)
            if position is None:
                continue
            lso = consumer.last_stable_offset(t.tp)
            if lso is not None and lso >= 0:
                t.lso = lso
            if position < t.lso:
                continue
            hw = consumer.highwater(t.tp)
            if t.verifying:  # read up to the stable end without meeting its record
                if hw is not None and t.lso <= t.checkpoint.marker < hw and not waited:
                    pending = True  # an open transaction holds it back: not yet readable
                    continue
                t.verifying = False
                await self._distrust(consumer, job, t, "no committed record there")
                continue
            want = job.written.get(t.store)
            if want is not None and position <= want and hw is not None and want < hw:
                # the last committed transaction wrote there and it is not readable yet:
                # its commit markers have not landed (it did not move the position: it
                # only fired wall-clock timers). Past the changelog's end (recreated or
                # truncated), the position alone decides, as before.
                pending = True
                continue
            if t.position == job.committed:
                t.done = True
                continue
            if hw is not None and t.lso >= hw:  # nothing pending: all there is
                t.unsettled_since = since
                waiting = self._unsettled(job, t, now)
                if waiting is None:
                    _settled(job, t)
                    continue
                ahead = ahead or waiting == "ahead"
                continue
            pending = True  # the previous owner's commit markers have not landed yet
        if ahead and self.refetch is not None:
            if now < job.refetch_at:
                return False  # asked again at most every _REFETCH_EVERY_S
            asked = time.monotonic()
            try:
                committed, written = await self.refetch(job.partition)
            except TransientError:
                job.answered_since = None  # no answer: the wait counts from the next one
                raise
            answered = time.monotonic()
            if not self._restoring.current(job):
                return False
            if answered - asked > _SLOW_ANSWER_S:
                job.answered_since = answered  # after a stall, perhaps from a cache
            elif job.answered_since is None:
                job.answered_since = answered
            job.refetch_at = answered + _REFETCH_EVERY_S
            if committed != job.committed:
                # a store found done at the old offset is not done at the new one: it
                # reads on (its changelog's markers may be the ones still in flight)
                for target in job.targets:
                    target.done = target.done and target.position == committed
            job.committed, job.written = committed, written
            return False  # checked again once the next fetch from the changelog is in
        if not pending:
            job.pending_since = None
        elif waited:
            topic, p = job.partition
            raise FatalError(
                f"restoring the stores of {topic}[{p}]: the changelog does not show "
                f"the transaction that committed input offset {job.committed} after "
                f"{self._wait_s:g} s (a transaction stays open on it)"
            )
        else:
            job.pending_since = job.pending_since or now
        if not self._restoring.current(job):
            return False
        if all(t.done for t in job.targets):
            self._report(job, now, final=True)
            return True
        if report_due(job, now):
            self._report(job, now, final=False)
        return False

    def _unsettled(self, job: Job, t: _Target, now: float) -> str | None:
        """Whether ``t``'s store, at a position other than the committed offset with
        nothing pending on its changelog, waits (for at most ``transaction_timeout_s``,
        counted per store from the first check that found it so, and again when it
        turns from ahead to behind or back; ahead, counted only from
        ``Job.answered_since``) rather than being settled (``_settled``) -- and for
        what: ``"ahead"``, the committed offset fetched again (``refetch``);
        ``"behind"``, the changelog read on.
        Neither answer need be the last word: the offset's may come from a group
        coordinator answering from its cache, the changelog's end from a leader that has
        not learnt yet that another broker took its partitions over (it answers, stable,
        up to the end it holds). A store behind with no position at all (a store added
        to a running pipeline: its changelog holds no position record) settles at once."""
        if job.committed is not None and (t.position is None or t.position < job.committed):
            if t.position is None:
                return None
            waiting = "behind"
        elif self.refetch is None:
            return None
        else:
            waiting = "ahead"
        if t.unsettled_since is None or t.waiting != waiting:  # a new wait, logged once
            t.unsettled_since, t.waiting = now, waiting
            topic, p = job.partition
            log.info(
                "store %r of %s[%d] reflects input up to offset %s, %s the committed "
                "offset fetched (%s) with nothing pending on its changelog: %s for up to "
                "%g s",
                t.store,
                topic,
                p,
                t.position,
                waiting,
                job.committed,
                "fetching the offset again (counting answered time)"
                if waiting == "ahead"
                else "reading the changelog on",
                self.config.transaction_timeout_s,
            )
            if waiting == "ahead":
                job.answered_since = None  # counted from the first answer from now on
        since = t.unsettled_since
        if waiting == "ahead":
            if job.answered_since is None:
                return waiting  # no answer yet since the wait began or last failed
            since = max(since, job.answered_since)
        if now - since <= self.config.transaction_timeout_s:
            return waiting
        return None

    def _report(self, job: Job, now: float, final: bool) -> None:
        topic, p = job.partition
        applied = sum(t.applied for t in job.targets)
        took = now - job.started
        if final:
            if applied:
                log.info(
                    "restored the stores of %s[%d]: %d changelog records in %.1f s",
                    topic,
                    p,
                    applied,
                    took,
                )
            return
        for t in job.targets:
            log.info(
                "restoring store %r of %s[%d]: %d records applied (%.0f/s), reading "
                "towards the stable offset %d",
                t.store,
                topic,
                p,
                t.applied,
                t.applied / took if took > 0 else 0.0,
                t.lso,
            )


def _settled(job: Job, t: _Target) -> None:
    """Nothing is pending on the changelog and the store's position is not the group's
    committed offset (and, with a position, has not become it for
    ``transaction_timeout_s``: ``Restorer._unsettled``). Behind it: the input was
    processed without this store for a while (a store added to a running pipeline) --
    logged, and the restore is done. Ahead of it (or offsets where the group has none):
    the state already reflects input that would be processed again, counted twice -- the
    group's offsets were reset or expired behind the state. That stops the app."""
    topic, p = job.partition
    if job.committed is None or (t.position is not None and t.position > job.committed):
        raise FatalError(
            f"store {t.store!r} of {topic}[{p}] reflects input up to offset {t.position}, "
            f"but the group's committed offset is {job.committed}: its records would be "
            "applied twice (were the group's offsets reset or expired?); reset the state "
            "too (delete the changelog and the local state) or restore the offsets"
        )
    log.warning(
        "store %r of %s[%d] reflects input offset %s but the group committed %s (was the "
        "input processed without this store?); going on with it",
        t.store,
        topic,
        p,
        t.position,
        job.committed,
    )
    t.done = True


def _confirms(record: object, cp: Checkpoint) -> bool:
    """Whether ``record`` (the first committed record read at the checkpoint's position
    record) is that record: same offset, the position key, the same position."""
    if getattr(record, "offset", None) != cp.marker or getattr(record, "key", None) != RESERVED_KEY:
        return False
    try:
        return decode_position(record.value) == cp.position  # type: ignore[attr-defined]
    except ValueError:
        return False


def _describe(record: object) -> str:
    offset = getattr(record, "offset", "?")
    if getattr(record, "key", None) == RESERVED_KEY:
        return f"a position record at {offset} with another position"
    return f"a data record at {offset} first (the position record is aborted or gone)"
