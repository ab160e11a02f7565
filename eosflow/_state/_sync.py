"""``Sync``: the order in which a processor with tables sees its records, by timestamp.

Without it, whether an order sees the customer row produced a moment before it would
depend on which partition the consumer happened to fetch first: outputs would change
from run to run and after every crash. With tables declared (``_tables``), every poll's
records pass through here before ``process``:

- **A task** is one partition number p: partition p of every input topic and of every
  table topic, which one instance holds together (co-partitioning).
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
- ``idle_s`` (``Table.max_idle_s``'s largest, 0 by default): how long a task also waits
  for a partition that has caught up but holds nothing, for a record still on its way
  to the broker. Waiting costs latency; not waiting lets a row produced at t but not yet
  written when the stream's record at t is processed miss it.

Records are counted by their Kafka timestamps (``record.timestamp``), not by
``Processor.timestamp``: the order is the topics', whatever the processor reads.

**Buffers never outlive a seek.** Records handed here are past the consumer's position;
whenever a partition is positioned again (an abort's rewind, records given back, a
revocation) ``forget`` drops its buffer, and the consumer delivers them again.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._records import Record

log = logging.getLogger("eosflow.state")

Partition = tuple[str, int]
_WARN_AFTER_S = 10.0  # a task held back this long is logged (then every as long again)


class Sync:
    def __init__(
        self,
        streams: Iterable[str],
        tables: Iterable[str],
        idle_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tables = frozenset(tables)
        # a task's topics, tables first: the tie-break (lower rank first)
        self._topics = [*sorted(self._tables), *sorted(set(streams) - self._tables)]
        self._rank = {t: i for i, t in enumerate(self._topics)}
        self._idle_s, self._clock = idle_s, clock
        self._buffers: dict[Partition, deque[Record]] = {}
        self._idle: dict[int, float] = {}  # task -> since when it waits on idle partitions
        self._waiting: dict[int, float] = {}  # task -> since when (and the next warning)

    def buffered(self) -> int:
        return sum(len(b) for b in self._buffers.values())

    def forget(self, partition: Partition) -> None:
        """``partition`` was positioned again: its buffered records will come again."""
        self._buffers.pop(partition, None)

    def admit(
        self, records: Iterable[Record], caught_up: Callable[[Partition], bool]
    ) -> list[Record]:
        """Buffer ``records`` (offset order within a partition) and return those that
        may be processed now, in the order they must be. ``caught_up(partition)``: the
        partition is held, ready and read up to its last stable offset."""
        buffers = self._buffers
        for r in records:
            key = (r.topic, r.partition)
            buf = buffers.get(key)
            if buf is None:
                buf = buffers[key] = deque()
            buf.append(r)
        out: list[Record] = []
        for task in sorted({p for (_t, p), b in buffers.items() if b}):
            self._release(task, caught_up, out)
        return out

    def _release(
        self, task: int, caught_up: Callable[[Partition], bool], out: list[Record]
    ) -> None:
        buffers, rank = self._buffers, self._rank
        members = [(t, task) for t in self._topics]
        queues = [buffers.get(m) for m in members]
        while True:
            best: Record | None = None
            best_at = 0
            empty: list[Partition] = []
            for i, q in enumerate(queues):
                if not q:
                    queue = buffers.get(members[i])  # one may have come since
                    if not queue:
                        empty.append(members[i])
                        continue
                    queues[i] = q = queue
                head = q[0]
                if best is None or (head.timestamp, rank[head.topic]) < (
                    best.timestamp,
                    rank[best.topic],
                ):
                    best, best_at = head, i
            if best is None:
                self._waiting.pop(task, None)
                return
            behind = [m for m in empty if not caught_up(m)]
            if behind:
                self._held_back(task, best, behind)
                return
            if empty and self._idle_s > 0:
                now = self._clock()
                since = self._idle.setdefault(task, now)
                if now - since < self._idle_s:
                    return
            self._idle.pop(task, None)
            self._waiting.pop(task, None)
            q = queues[best_at]
            assert q is not None
            out.append(q.popleft())

    def _held_back(self, task: int, head: Record, behind: list[Partition]) -> None:
        now = self._clock()
        since = self._waiting.setdefault(task, now)
        if now - since >= _WARN_AFTER_S:
            self._waiting[task] = now  # warned: again after as long
            log.warning(
                "%s[%d] (next record at %d) waits for %s to be read up to its last "
                "stable offset (a table must catch up before the records it may join)",
                head.topic,
                head.partition,
                head.timestamp,
                ", ".join(f"{t}[{p}]" for t, p in behind),
            )
