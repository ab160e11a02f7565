"""``Sync``: the order in which a processor with tables sees its records, by timestamp.

Without it, whether an order sees the customer row produced a moment before it would
depend on which partition the consumer happened to fetch first: outputs would change
from run to run and after every crash. With tables declared (``_tables``), every poll's
records pass through here before ``process``:

- **A task** is one partition number p: partition p of every input topic and of every
  table topic, which one instance holds together (co-partitioning). In a pipeline,
  partition p of one stage's inputs and tables (``group``: each such group of topics
  has tasks of its own, and a topic in none is taken in offset order alone).
- Records wait in a buffer per partition. A task hands on, one at a time, the record
  with the **lowest timestamp** among its partitions' first buffered records (ties:
  a table's first, so a row and a record of the same millisecond join; then by topic).
- It may do so only while every other partition of the task either has a buffered
  record, or **has caught up**: held, ready (restored), and read up to its last stable
  offset. A partition with records on the broker not yet fetched holds its whole task
  back, as Kafka Streams' ``max.task.idle.ms`` does (KIP-353, KIP-695): the record it
  will deliver may be older. So a stream record with timestamp t is processed only once
  every table partition it reads has been read up to t, and a table record is applied
  only after the stream records older than it.
- ``idle_s`` (the largest ``Table.max_idle_s``, 0 by default): how long a task also
  waits, once a partition has caught up and holds nothing, for a record still on its
  way to the broker (then it goes on without, until that partition has records again).
  Waiting costs latency; not waiting lets a row produced at t but written after the
  stream's record at t was processed miss it: then the outputs depend on timing, as
  they do in Kafka Streams.

Records are counted by their Kafka timestamps (``record.timestamp``), not by
``Processor.timestamp``: the order is the topics', whatever the processor reads.

**Buffers never outlive a seek.** Records handed here are past the consumer's position;
whenever a partition is positioned again (an abort's rewind, a revocation) ``forget``
drops its buffer, and the consumer delivers them again.

**Records given back stay here.** A transaction that reaches its deadline gives back the
records of its last admit it did not process (``give_back``): they go back to the head
of their buffers, in the order they left, and are the first handed on next. Seeking the
consumer back instead would drop every buffered record of those partitions with them,
to be fetched and decoded again: measured on a join of 300,000 orders, 49 give-backs
dropped 277,079 buffered records. When a partition was positioned again since that
admit, nothing is taken back (the caller seeks, as before).

**Bounded.** A partition holding more than ``MAX_BUFFERED`` records is paused
(``throttle``) until half of them went on, so a stream waiting for a long table restore
does not pull its whole backlog into memory; an ``admit`` hands on at most the poll's
``max_records`` (the rest wait, ``more`` says so), so a transaction's record caps hold;
a poll takes at most ``TAKES`` records from the consumer.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._records import Partition
from ._placement import Placement

if TYPE_CHECKING:
    from .._records import Record

log = logging.getLogger("eosflow.state")

_WARN_AFTER_S = 10.0  # a task held back this long is logged (then every as long again)
MAX_BUFFERED = 10_000  # per partition; past it the partition is paused
TAKES = 5_000  # records a poll takes from the consumer at most (``takes``)


def _head_key(entry: tuple[deque[Record], int]) -> tuple[int, int]:
    """A non-empty queue's place in the merge: its head's timestamp, then its rank."""
    queue, rank = entry
    return queue[0].timestamp, rank


def _never(partition: Partition) -> bool:
    return False


def _nothing(partition: Partition, paused: bool) -> None:
    pass


@dataclass(frozen=True)
class Feed:
    """What the sync asks of the consumer's side -- the session's positions on its
    consumer, read when asked (the consumer exists only once the session started):
    whether a partition is held, ready and read up to its last stable offset; pause a
    partition (True) or resume it. By default nothing is caught up, nothing paused."""

    caught_up: Callable[[Partition], bool] = _never
    throttle: Callable[[Partition, bool], None] = _nothing


class Unsynced:
    """The sync of an app whose inputs are not co-partitioned (no tables): records go
    on as polled, nothing is buffered or given back."""

    more = False
    # the poll asks the consumer for at most what it may process, and at most ``TAKES``
    # (a long decode holds the event loop: ``Sync.takes``)
    ahead, takes = False, TAKES

    def admit(self, runs: Sequence[Sequence[Record]], max_records: int) -> list[Record]:
        out: list[Record] = []
        for run in runs:
            out += run
        return out

    def give_back(self, records: list[Record]) -> bool:
        return False

    def forget(self, partition: Partition) -> None:
        pass


class Sync:
    # The poll takes what the consumer has fetched, not only what may be processed:
    # aiokafka sends no fetch to a broker while records it fetched from it are not
    # taken, and a fetch of only partitions read to their end waits at the broker
    # (``fetch_max_wait_ms``) while the rest wait for it. Held here instead (bounded by
    # ``throttle``). But at most ``TAKES`` a poll: decoding a whole fetch at once (up
    # to 4 MiB a partition; ~15,000 records a poll on a join) held the event loop for
    # 10-25 ms, and the producer's next request with it.
    ahead, takes = True, TAKES

    def __init__(
        self,
        streams: Iterable[str],
        tables: Iterable[str],
        idle_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        feed: Feed = Feed(),
    ) -> None:
        self._tables = frozenset(tables)
        # a task's topics, tables first: the tie-break (lower rank first)
        self._topics = [*sorted(self._tables), *sorted(set(streams) - self._tables)]
        self._rank = {t: i for i, t in enumerate(self._topics)}
        # the groups of topics whose partition p make a task (``group``): all by default
        self._groups: list[list[str]] = [self._topics]
        self._group_of = dict.fromkeys(self._topics, 0)
        self._idle_s, self._clock = idle_s, clock
        self._buffers: dict[Partition, deque[Record]] = {}
        # a task is (group, partition number)
        self._idle: dict[tuple[int, int], float] = {}  # since when it waits on idle ones
        self._waiting: dict[tuple[int, int], float] = {}  # since when (and the next warning)
        self._paused: set[Partition] = set()  # by ``throttle``, their buffers full
        self.more = False  # the last admit stopped at its max_records: more may go now
        self._forgets = self._lent = 0  # forgets so far; so far at the last admit
        self.placement = Placement()  # keys where the default partitioner puts them
        # whether a partition is caught up; pause (True) or resume one
        self.caught_up, self.throttle = feed.caught_up, feed.throttle

    def group(self, tasks: Iterable[frozenset[str]]) -> None:
        """Take partition p of each of ``tasks``' topic groups together (a pipeline's
        co-partitioned stages; each topic in at most one), every other topic alone."""
        rank = self._rank
        groups = [sorted(t for t in task if t in rank) for task in tasks]
        covered = {t for g in groups for t in g}
        groups += [[t] for t in self._topics if t not in covered]
        self._groups = [sorted(g, key=rank.__getitem__) for g in groups if g]
        self._group_of = {t: i for i, g in enumerate(self._groups) for t in g}

    def buffered(self) -> int:
        return sum(len(b) for b in self._buffers.values())

    def forget(self, partition: Partition) -> None:
        """``partition`` was positioned again: its buffered records will come again."""
        self._buffers.pop(partition, None)
        self._forgets += 1
        if partition in self._paused:
            self._paused.discard(partition)
            self.throttle(partition, False)

    def admit(self, runs: Sequence[Sequence[Record]], max_records: int) -> list[Record]:
        """Buffer ``runs`` (a poll's records, one list a partition, in offset order) and
        return at most ``max_records`` that may be processed now, in the order they
        must be."""
        buffers = self._buffers
        for run in runs:
            if not run:
                continue
            self.placement.check(run)
            first = run[0]
            key = (first.topic, first.partition)
            buf = buffers.get(key)
            if buf is None:
                buf = buffers[key] = deque()
            buf.extend(run)
        for key, buf in buffers.items():
            if len(buf) > MAX_BUFFERED and key not in self._paused:
                self._paused.add(key)
                self.throttle(key, True)
        out: list[Record] = []
        self.more = False
        self._lent = self._forgets
        group_of = self._group_of
        for task in sorted({(group_of[t], p) for (t, p), b in buffers.items() if b}):
            if self._release(task, self.caught_up, out, max_records):
                self.more = True
                break
        for key in [k for k in self._paused if len(buffers.get(k) or ()) <= MAX_BUFFERED // 2]:
            self._paused.discard(key)
            self.throttle(key, False)
        return out

    def give_back(self, records: list[Record]) -> bool:
        """Records the last ``admit`` handed on and were not processed, back to the head
        of their buffers to be handed on first again; False, taking none, when a
        partition was positioned again since (``forget``: the consumer delivers anew)
        or a record is not older than its buffer's head (not from the last admit)."""
        if self._forgets != self._lent:
            return False
        buffers = self._buffers
        last: dict[Partition, int] = {}  # each partition's last offset given back
        for r in records:
            last[(r.topic, r.partition)] = r.offset
        for key, offset in last.items():
            buf = buffers.get(key)
            if buf and buf[0].offset <= offset:
                return False
        for r in reversed(records):
            key = (r.topic, r.partition)
            buf = buffers.get(key)
            if buf is None:
                buf = buffers[key] = deque()
            buf.appendleft(r)
        self.more = bool(records)
        return True

    def _release(
        self,
        task: tuple[int, int],
        caught_up: Callable[[Partition], bool],
        out: list[Record],
        cap: int,
    ) -> bool:
        """Hand on ``task``'s records that may go, up to ``cap`` in ``out``; True when
        it stopped at the cap. Decided per stretch, not per record: while the same
        partitions hold records, the others' state cannot change (nothing is fetched
        meanwhile), so one check covers every record until one of them runs dry."""
        buffers, rank = self._buffers, self._rank
        group, number = task
        members = [(t, number) for t in self._groups[group]]
        while True:
            full = [q for m in members if (q := buffers.get(m))]
            if not full:
                self._waiting.pop(task, None)
                return False
            empty = [m for m in members if not buffers.get(m)]
            behind = [m for m in empty if not caught_up(m)]
            if behind:
                head = min((q[0] for q in full), key=lambda r: (r.timestamp, rank[r.topic]))
                self._held_back(task, head, behind)
                return False
            if empty and self._idle_s > 0:  # waited once per stretch of emptiness
                now = self._clock()
                since = self._idle.setdefault(task, now)
                if now - since < self._idle_s:
                    return False
            elif not empty:
                self._idle.pop(task, None)
            self._waiting.pop(task, None)
            room = cap - len(out)
            if room <= 0:
                return True
            if len(full) == 1:  # one partition holds records: in offset order
                q = full[0]
                out.extend(q.popleft() for _ in range(min(room, len(q))))
                continue
            # merge by (timestamp, rank) until one runs dry, a run at a time: the queue
            # whose head goes first hands on records while they go before the next
            # queue's head -- timestamps up to ``bound``, the next head's own on a tie
            # when its rank is higher (ranks differ: one topic a queue; timestamps are
            # integers) -- with no tuple a record, and with two queues (a stream and a
            # table) no sort either
            ranked = [(q, rank[q[0].topic]) for q in full]  # in rank order, as members
            append = out.append
            while room > 0:
                if len(ranked) == 2:  # the lower rank's head goes first on a tie
                    a, b = ranked[0][0], ranked[1][0]
                    ta, tb = a[0].timestamp, b[0].timestamp
                    best, bound = (a, tb) if ta <= tb else (b, ta - 1)
                else:
                    ranked.sort(key=_head_key)
                    (best, best_rank), (after, after_rank) = ranked[0], ranked[1]
                    bound = after[0].timestamp - (best_rank > after_rank)
                pop = best.popleft
                append(pop())  # its head is the lowest of all: it goes
                room -= 1
                while room > 0 and best and best[0].timestamp <= bound:
                    append(pop())
                    room -= 1
                if not best:
                    break

    def _held_back(self, task: tuple[int, int], head: Record, behind: list[Partition]) -> None:
        now = self._clock()
        since = self._waiting.setdefault(task, now)
        if now - since >= _WARN_AFTER_S:
            self._waiting[task] = now  # warned: again after as long
            log.warning(
                "%s[%d] (next record at %d) waits for %s to be read up to its last "
                "stable offset (a partition number's topics go in timestamp order)",
                head.topic,
                head.partition,
                head.timestamp,
                ", ".join(f"{t}[{p}]" for t, p in behind),
            )
