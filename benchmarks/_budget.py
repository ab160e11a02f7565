"""The one transaction budget every contender of ``compare.py`` gets, and the rule that
ends a transaction in the hand-written loops.

A transaction ends at the first of: ``interval_s`` from its first record, ``records``
records, ``bytes`` key+value bytes, or -- once it is ``min_txn_s`` old -- a poll that
finds nothing buffered (the input has caught up, so nothing gains from waiting). These
are eosflow's own rules (``eosflow/_engine/_sizing.py``), and by default eosflow's own defaults,
read from ``EosConfig`` so that the two cannot drift apart. Until 2026-11-27 the loops
held 1,000 records a transaction against eosflow's 20,000, and paid twenty times the
commits: the published 3.41x over librdkafka was 2.41x with equal budgets.

How each contender is given it (``benchmarks/README.md`` gives the reasons):

- eosflow: ``commit_interval_s``, ``max_records_per_txn``, ``max_bytes_per_txn`` and
  ``min_transaction_s`` (``eosflow_settings``);
- the aiokafka and librdkafka loops: ``TxnRule`` below, the same code in both;
- quixstreams: ``commit_interval`` and ``commit_every`` (``quix_settings``); it has
  neither a byte cap nor a caught-up commit, so it commits later than the rules say
  when its input is slow;
- Kafka Streams: its processor requests every commit (``ProcessorContext.commit()``) by
  these rules (``java/PassThrough.java``);
- Kafka's ``TransactionalMessageCopier``: ``--transaction-size`` -- its own rule is one
  poll of at most that many records a transaction; it has no interval and no byte cap.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from eosflow import EosConfig


@dataclass(frozen=True)
class Budget:
    interval_s: float
    records: int
    bytes: int | None  # None: no byte cap
    min_txn_s: float

    @classmethod
    def defaults(cls) -> Budget:
        """eosflow's defaults, from the settings model itself."""
        fields = EosConfig.model_fields
        return cls(
            interval_s=fields["commit_interval_s"].default,
            records=fields["max_records_per_txn"].default,
            bytes=fields["max_bytes_per_txn"].default,
            min_txn_s=fields["min_transaction_s"].default,
        )

    def but(self, **changes: Any) -> Budget:
        return replace(self, **changes)

    def argv(self) -> list[str]:
        """The budget as a contender process's arguments (``from_argv`` reads them)."""
        return [
            repr(self.interval_s),
            str(self.records),
            str(self.bytes or 0),
            repr(self.min_txn_s),
        ]

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> Budget:
        interval, records, nbytes, min_txn = argv
        return cls(float(interval), int(records), int(nbytes) or None, float(min_txn))

    def describe(self) -> str:
        cap = "no byte cap" if self.bytes is None else f"{self.bytes / 1024 / 1024:g} MiB"
        return (
            f"{self.records:,} records / {cap} / {self.interval_s * 1000:g} ms a transaction, "
            f"ended early once caught up and {self.min_txn_s * 1000:g} ms old"
        )


def eosflow_settings(budget: Budget) -> dict[str, Any]:
    """The ``EosConfig`` fields that carry the budget."""
    return {
        "commit_interval_s": budget.interval_s,
        "max_records_per_txn": budget.records,
        "max_bytes_per_txn": budget.bytes,
        "min_transaction_s": budget.min_txn_s,
    }


def quix_settings(budget: Budget) -> dict[str, Any]:
    """quixstreams' ``Application`` arguments that carry what of the budget it can take."""
    return {"commit_interval": budget.interval_s, "commit_every": budget.records}


class TxnRule:
    """When a hand-written loop's transaction ends, as eosflow's does.

    ``begin()`` when the first records of a transaction arrived, ``took()`` after each
    poll's records went into it, ``end()`` once it committed. ``room()`` is how many
    records the next poll may take (the record cap, and the byte cap at the bytes per
    record measured so far), ``wait_s()`` how long it may wait for them (until
    ``min_txn_s`` from the transaction's start, or the interval's end if sooner: past that
    a poll that finds nothing ends it), and ``full()`` whether a cap or the interval ends
    it now."""

    def __init__(self, budget: Budget, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget, self._clock = budget, clock
        self.opened = 0.0
        self.records = self.bytes = 0
        self._seen_records = self._seen_bytes = 0  # over the run: bytes per record

    def begin(self) -> None:
        self.opened = self._clock()

    def end(self) -> None:
        self.records = self.bytes = 0

    def took(self, records: int, nbytes: int) -> None:
        self.records += records
        self.bytes += nbytes
        self._seen_records += records
        self._seen_bytes += nbytes

    def room(self) -> int:
        left = self.budget.records - self.records
        if self.budget.bytes is not None and self._seen_records:
            per_record = self._seen_bytes / self._seen_records
            left = min(left, int((self.budget.bytes - self.bytes) / per_record))
        return max(left, 1)

    def wait_s(self) -> float:
        b = self.budget
        return max(0.0, self.opened + min(b.interval_s, b.min_txn_s) - self._clock())

    def full(self) -> bool:
        b = self.budget
        return (
            self.records >= b.records
            or (b.bytes is not None and self.bytes >= b.bytes)
            or self._clock() - self.opened >= b.interval_s
        )
