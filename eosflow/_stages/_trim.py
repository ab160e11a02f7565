"""``Trimmer``: a pipeline's repartition topics kept small.

After each commit, the records of a repartition partition below the offset the group
just committed there are no one's any more: every stage reading the topic reads it in
this group, and the commit covers all of them (Kafka Streams purges its repartition
topics alike). The trimmer deletes them with DeleteRecords -- only after the commit,
never before (deleted first, an abort would rewind to offsets whose records are gone:
lost) -- in a task of its own, so a commit never waits for it.

One DeleteRecords round is in flight at a time; offsets committed meanwhile wait for the
next commit. A round that fails (a leader moved, a producer replaced) is logged and its
offsets are tried again with the next commit: trimming late costs disk, not records.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Mapping
from typing import Any

from .. import _aiokafka as ak
from .._errors import EosflowError
from .._records import Partition

__all__ = ["Trimmer"]

log = logging.getLogger("eosflow.stages")

LAST_ROUND_S = 5.0  # the bound of the round a stop runs


class Trimmer:
    """Deletes what the group committed past in ``topics`` (the repartition topics),
    each DeleteRecords bounded by ``timeout_s``."""

    def __init__(self, topics: Collection[str], timeout_s: float) -> None:
        self._topics = frozenset(topics)
        self._timeout_s = timeout_s
        self._wanted: dict[Partition, int] = {}  # committed, not deleted yet
        self._done: dict[Partition, int] = {}  # each partition's log start, as we set it
        self._task: asyncio.Task[None] | None = None
        self._producer: Any = None  # the last commit's
        self.rounds = 0  # DeleteRecords rounds that succeeded

    def committed(self, producer: Any, offsets: Mapping[Partition, int]) -> None:
        """A transaction committed ``offsets``: start deleting below those of the
        repartition topics (never blocks)."""
        self._producer = producer
        for tp, offset in offsets.items():
            if tp[0] in self._topics and offset > self._done.get(tp, 0):
                self._wanted[tp] = max(offset, self._wanted.get(tp, 0))
        if self._wanted and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._round(producer), name="eosflow-trim")

    async def _round(self, producer: Any, timeout_s: float | None = None) -> None:
        wanted, self._wanted = self._wanted, {}
        try:
            await ak.delete_records(producer, wanted, timeout_s or self._timeout_s)
        except EosflowError as exc:
            for tp, offset in wanted.items():  # again with the next commit
                self._wanted[tp] = max(offset, self._wanted.get(tp, 0))
            log.warning("repartition topics not trimmed yet (again after the next commit): %s", exc)
            return
        for tp, offset in wanted.items():
            self._done[tp] = max(offset, self._done.get(tp, 0))
        self.rounds += 1

    async def stop(self) -> None:
        """Wait for the round in flight, then run one more for what the last commits left,
        bounded by ``LAST_ROUND_S`` (a stop on a broker that stopped answering is not held
        up for long): a clean stop leaves the topics trimmed."""
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(Exception):
                await task
        if self._wanted and self._producer is not None:
            await self._round(self._producer, min(self._timeout_s, LAST_ROUND_S))
        self._producer = None
