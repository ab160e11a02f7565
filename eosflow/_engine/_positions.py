"""``Positions``: which partitions this member may process, and where each one stands.

The session's source of truth for ownership, kept apart from aiokafka's own view:

- ``ready``: assigned partitions whose committed offsets are in place. A partition that
  is assigned but not yet positioned is not processed: ``poll`` skips its records;
- ``committed``: the committed offset of each, ``None`` where the group has none (the
  reset policy then decides). It is updated by every commit and re-read after a recovery;
- ``epoch``: moves whenever ``ready`` changes or positions are re-read. Records polled
  under one epoch may only be committed under the same one;
- ``identity``: the group generation and member id the partitions of this epoch were
  assigned under, which TxnOffsetCommit and the forced heartbeat carry.

Committed offsets are read with RequireStable when the broker has KIP-447 and it is
wanted (``stable``), so an offset staged by a transaction still open elsewhere is waited
for. Without it, a read first waits ``post_commit_delay_s`` for the previous owner's
markers to land (trade-off: slower rebalances, but never an offset read too early).

The classic protocol rebalances eagerly: a revocation takes every partition. Under the
consumer protocol (KIP-848) a revocation takes a subset and an assignment adds to what
is held; ``revoke`` and ``take`` move the epoch only when the open transaction is touched.

A partition with state stores is **held back** after its set-up (paused, not ready)
until its stores are restored; ``release`` then makes it ready. Becoming ready this way
does not move the epoch: nothing of it was polled before, so no transaction's records
go stale.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from .. import _aiokafka as ak
from .._config import EosConfig
from .._records import Partition, PartitionOffsets, Record, lag_of

log = logging.getLogger("eosflow.session")


class Positions:
    def __init__(
        self,
        config: EosConfig,
        metadata: dict[TopicPartition, str] | None = None,
        moved: Callable[[Partition], None] = lambda partition: None,
        tasks: bool = False,
    ) -> None:
        """``metadata``: the committed offsets' metadata, kept here and read by the stores;
        ``moved``: told of each partition positioned again or given up (records polled
        of it and not processed will come again: ``Sync.forget``); ``tasks``:
        co-partitioned (tables, ``Processor.copartitioned``), partition p of every topic
        one task, whose records read one another's state."""
        self.config = config
        self.ready: set[TopicPartition] = set()
        self.held: set[TopicPartition] = set()  # assigned, set up, stores restoring
        self.committed: dict[Partition, int | None] = {}  # TopicPartition keys are tuples too
        self.metadata: dict[TopicPartition, str] = {} if metadata is None else metadata
        self.polled: dict[TopicPartition, int] = {}  # past the last record polled (lag)
        # bumped whenever partitions come or go (or positions are re-read after recovery)
        self.epoch = 0
        self.identity: ak.GroupIdentity | None = None
        self.stable = False  # RequireStable fetches; set once the broker's caps are known
        # the member a fetch names (OffsetFetch v9, the consumer protocol); None: none
        self.member: Callable[[], tuple[str, int] | None] | None = None
        self.moved, self.tasks = moved, tasks

    def stale(self, epoch: int, consumed: Iterable[tuple[str, int]]) -> str | None:
        """Why a transaction begun under ``epoch`` that consumed from ``consumed`` may not
        commit, if it may not: the assignment changed since its records were polled, or
        it marked offsets of a partition no longer held."""
        if epoch != self.epoch:
            return "partitions revoked"
        gone = sorted(f"{t}[{p}]" for t, p in consumed if TopicPartition(t, p) not in self.ready)
        if gone:
            return f"offsets of partitions no longer held: {', '.join(gone)}"
        return None

    def revoke(
        self,
        revoked: set[TopicPartition],
        consumed: Mapping[tuple[str, int], int] | None = None,
    ) -> tuple[set[TopicPartition], bool]:
        """Give up ``revoked``; returns what was given up and whether the epoch moved.

        Eagerly (``consumed`` None: the classic protocol) every partition still held goes
        too -- aiokafka reports an empty set when the assignment was already lost -- and
        the epoch moves if anything went. Incrementally (KIP-848; ``consumed``: the open
        transaction's offsets) only ``revoked`` goes, and the epoch moves only if the
        transaction consumed from one of them or records of one were polled past what
        it consumed (still in the app's hands): a transaction that never touched them
        goes on. With ``tasks``, one that touched another partition of the same number
        moves it too: those records read the state of the partition that went."""
        if consumed is None:
            gone = revoked | self.ready | self.held
        else:
            gone = revoked & (self.ready | self.held)
        suspects = gone
        if self.tasks and consumed is not None:
            numbers = {tp.partition for tp in gone}
            suspects = {tp for tp in self.ready | self.held if tp.partition in numbers}
        moved = bool(gone) and (
            consumed is None or any(self._touched(tp, consumed) for tp in suspects)
        )
        if moved:
            self.epoch += 1
        self.ready -= gone
        self.held -= gone
        for tp in gone:
            self.committed.pop(tp, None)
            self.polled.pop(tp, None)
            self.moved((tp.topic, tp.partition))
        return gone, moved

    def _touched(self, tp: TopicPartition, consumed: Mapping[tuple[str, int], int]) -> bool:
        key = (tp.topic, tp.partition)
        base = consumed.get(key, self.committed.get(tp))
        return key in consumed or self.polled.get(tp, -1) > (base if base is not None else -1)

    async def take(
        self,
        consumer: AIOKafkaConsumer,
        assigned: set[TopicPartition],
        hold: Callable[[Mapping[tuple[str, int], int | None]], set[tuple[str, int]]],
        identity: ak.GroupIdentity,
        incremental: bool = False,
    ) -> list[TopicPartition]:
        """Position the newly ``assigned`` partitions at their committed offsets, paused
        meanwhile so nothing is fetched from an old position, then make them ready --
        but those ``hold`` returns (given each new partition's committed offset), which
        stay paused until ``release``d. Returns the new ones. ``identity`` (the group's,
        taken before any await) is kept. Added ``incremental``ly (KIP-848), new
        partitions do not move the epoch: nothing of them was polled before."""
        self.identity = identity
        new = [tp for tp in assigned if tp not in self.ready]
        if not new:
            return new
        ak.pause(consumer, new)
        held: set[tuple[str, int]] = set()
        try:
            self.committed.update(await self.fetch(consumer, new, patient=True))
            await self.place(consumer, new, patient=True)
            held = hold({(tp.topic, tp.partition): self.committed.get(tp) for tp in new})
            self.held.update(TopicPartition(*p) for p in held)
            self.ready.update(tp for tp in new if (tp.topic, tp.partition) not in held)
            self.epoch += 0 if incremental else 1
        finally:
            ak.resume(consumer, [tp for tp in new if (tp.topic, tp.partition) not in held])
        return new

    def release(self, consumer: AIOKafkaConsumer, partition: tuple[str, int]) -> bool:
        """A held-back partition is ready (its stores restored): process it. False if
        it is no longer assigned."""
        tp = TopicPartition(*partition)
        self.held.discard(tp)
        if tp not in consumer.assignment():
            return False
        self.ready.add(tp)
        ak.resume(consumer, [tp])
        return True

    def hold_back(self, consumer: AIOKafkaConsumer, partitions: Iterable[tuple[str, int]]) -> None:
        """Stop processing ``partitions`` until each is ``release``d (paused, not ready)."""
        tps = [TopicPartition(*p) for p in partitions]
        self.ready.difference_update(tps)
        self.held.update(tps)
        if tps:
            ak.pause(consumer, [tp for tp in tps if tp in consumer.assignment()])

    async def reread(self, consumer: AIOKafkaConsumer) -> None:
        """Re-read every assigned partition's committed offset and go back to it (after a
        recovery, whose outcome only the broker knows)."""
        self.committed.update(await self.fetch(consumer, list(consumer.assignment())))
        await self.rewind(consumer)

    def refetcher(
        self, consumer: AIOKafkaConsumer
    ) -> Callable[[tuple[str, int]], Awaitable[int | None]]:
        """``refetch`` on ``consumer``, for the restores."""
        return functools.partial(self.refetch, consumer)

    async def refetch(self, consumer: AIOKafkaConsumer, partition: tuple[str, int]) -> int | None:
        """``partition``'s committed offset fetched again, and the partition (held back,
        paused) positioned there: a restore found its store ahead of the offset fetched
        on assignment. Where fetches are not stable, the offsets' commit marker may land
        after the changelog's; where they are, the answer may still have come from a
        group coordinator that lost the group while it was stopped and answered from its
        cache before it learnt so (seen on genuine 4.4.0)."""
        tp = TopicPartition(*partition)
        fetched = (await self.fetch(consumer, [tp], settle=False)).get(tp)
        before = self.committed.get(tp)
        # only while still held back (not revoked, not released), and only forwards: a
        # fetch of a recovery or a new assignment may have answered first
        if tp in self.held and fetched is not None and (before is None or fetched > before):
            self.committed[tp] = fetched
            await self.place(consumer, [tp])
        return self.committed.get(tp)

    async def fetch(
        self,
        consumer: AIOKafkaConsumer,
        partitions: list[TopicPartition],
        settle: bool = True,
        patient: bool = False,
    ) -> dict[TopicPartition, int | None]:
        """``partitions``' committed offsets (their metadata into ``metadata``); without
        stable fetches, after ``post_commit_delay_s`` unless not ``settle``.

        Tried for twice the transaction timeout (a stable fetch waits that long at most
        for an open transaction), or ``patient``ly for ``retry_timeout_s`` when nothing
        retries a failure (new partitions: unpositioned, they would stall, so a failure
        is fatal); each attempt for at most the transaction timeout, so that a stalled
        group coordinator is left for the broker the controller moves it to."""
        if not partitions:
            return {}
        if settle and not self.stable and self.config.post_commit_delay_s > 0:
            await asyncio.sleep(self.config.post_commit_delay_s)  # let markers land
        cfg = self.config
        return await ak.fetch_committed(
            consumer,
            cfg.group_id,
            partitions,
            require_stable=self.stable,
            timeout_s=self._budget_s(patient),
            member=self.member,
            metadata=self.metadata,
            attempt_s=cfg.transaction_timeout_s,
        )

    async def rewind(self, consumer: AIOKafkaConsumer) -> None:
        """Every assigned partition back to its committed offset (after an abort): what
        was polled past it is given up too. ``TransientError`` when a partition with
        nothing committed could not be placed (``place``): the caller must not go on
        reading it from where it is."""
        assigned = list(consumer.assignment())
        for tp in assigned:
            self.polled.pop(tp, None)
        await self.place(consumer, assigned)

    async def place(
        self, consumer: AIOKafkaConsumer, tps: list[TopicPartition], patient: bool = False
    ) -> None:
        """Position ``tps`` at their committed offsets; those with nothing committed where
        the reset policy says, asked of their leaders by eosflow (``ak.log_offsets``:
        no group coordinator involved, so a rebalance callback never waits on one),
        retried within the fetch's budget (``fetch``; ``patient``: new partitions), each
        attempt at most the transaction timeout; then ``TransientError``, those left
        where they were. A partition a concurrent rebalance took away is skipped: its
        next owner starts from the committed offset anyway."""
        fresh = []
        for tp in tps:
            offset = self.committed.get(tp)
            if offset is None:
                fresh.append(tp)
            else:
                self._seek(consumer, tp, offset)
        if not fresh:
            return
        cfg = self.config
        starts = await ak.log_offsets(
            consumer,
            fresh,
            cfg.auto_offset_reset,
            self._budget_s(patient),
            attempt_s=cfg.transaction_timeout_s,
        )
        for tp in fresh:
            committed = self.committed.get(tp)  # a commit may have come meanwhile
            self._seek(consumer, tp, starts[tp] if committed is None else committed)

    def _seek(self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> None:
        self.moved((tp.topic, tp.partition))
        if not ak.seek(consumer, tp, offset):
            log.debug("%s no longer assigned; not repositioned", tp)

    def _budget_s(self, patient: bool) -> float:
        """How long reading offsets may be retried: twice the transaction timeout, or
        ``patient``ly at least ``retry_timeout_s``."""
        cfg = self.config
        budget_s = cfg.transaction_timeout_s * 2
        return max(budget_s, cfg.retry_timeout_s) if patient else budget_s

    def caught_up(self, consumer: AIOKafkaConsumer, partition: tuple[str, int]) -> bool:
        """Whether ``partition`` is ready (held, restored) and its consumer has read up
        to its last stable offset (as the last fetch answer gave it)."""
        tp = TopicPartition(*partition)
        if tp not in self.ready:
            return False
        ends = ak.log_position(consumer, tp)
        return ends is not None and ends[1] is not None and ends[1] >= ends[0]

    def throttle(
        self, consumer: AIOKafkaConsumer, partition: tuple[str, int], paused: bool
    ) -> None:
        """Pause ``partition`` (``paused``) or resume it -- only while it is ready: one
        held back is paused until its release, one given up is no longer ours."""
        tp = TopicPartition(*partition)
        if tp in self.ready:
            (ak.pause if paused else ak.resume)(consumer, [tp])

    def runs(
        self, batch: Mapping[TopicPartition, list[Any]], consumed: Mapping[tuple[str, int], int]
    ) -> list[Sequence[Record]]:
        """A poll's ``batch`` as runs of records, one per partition: only ready
        partitions' (one not ready yet was fetched before its committed offset was in
        place: its seek fetches it again), none below what the open transaction
        ``consumed`` already (re-polled after a rewind). Each run's end is noted
        (``polled``, for lag)."""
        runs: list[Sequence[Record]] = []
        polled, ready = self.polled, self.ready
        for tp, msgs in batch.items():
            if tp not in ready or not msgs:
                continue
            records = ak.as_records(msgs)  # eosflow Records from aiokafka itself
            polled[tp] = records[-1].offset + 1
            floor = consumed.get(tp, -1)
            if records[0].offset < floor:
                records = [r for r in records if r.offset >= floor]
            if records:
                runs.append(records)
        return runs

    def offsets(self, consumer: AIOKafkaConsumer) -> dict[Partition, PartitionOffsets]:
        """Each held partition's committed offset, position, last stable offset and lag
        (``lag_of``: from the committed offset or, with none, the position; pending while
        records were polled past it); partitions not fetched yet are left out."""
        out: dict[Partition, PartitionOffsets] = {}
        for tp in self.ready | self.held:
            ends = ak.log_position(consumer, tp)
            if ends is None:
                continue
            stable, position = ends
            committed = self.committed.get(tp)
            base = position if committed is None else committed
            if base is None:
                continue
            lag = lag_of(stable, position, base, self.polled.get(tp, -1) > base)
            out[(tp.topic, tp.partition)] = PartitionOffsets(committed, position, stable, lag)
        return out

    def give_back(self, consumer: AIOKafkaConsumer, records: list[Record]) -> None:
        """Seek each partition of ``records`` still held back to the first of them."""
        for tp, offset in first_offsets(records).items():
            if tp in self.ready:
                self._seek(consumer, tp, offset)

    async def reposition(
        self, consumer: AIOKafkaConsumer, records: list[Record], committed: bool
    ) -> None:
        """Undo polling ``records`` that will not be processed: each partition still
        held goes back to its committed offset -- or, when the previous transaction
        ``committed`` and the partition has nothing committed yet, to the first of them
        (nothing before them is pending); else the reset policy decides, exactly as the
        abort's rewind did (the aborted records precede these)."""
        back = []
        for tp, offset in first_offsets(records).items():
            if tp not in self.ready:
                continue  # moved away: its next owner starts from the committed offset
            if committed and self.committed.get(tp) is None:
                self._seek(consumer, tp, offset)
            else:
                back.append(tp)
        await self.place(consumer, back)


def first_offsets(records: list[Record]) -> dict[TopicPartition, int]:
    """The lowest offset among ``records`` per partition."""
    first: dict[TopicPartition, int] = {}
    for r in records:
        tp = TopicPartition(r.topic, r.partition)
        first[tp] = min(first.get(tp, r.offset), r.offset)
    return first
