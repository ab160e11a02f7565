"""``Sizing``: how many records the app polls and a transaction takes.

A transaction ends at the first of: ``commit_interval_s`` from its start,
``max_records_per_txn`` records, ``max_bytes_per_txn`` key+value bytes, or (``process()``
only) its input having caught up once it is ``min_transaction_s`` old. The two caps bound
memory -- the records of work done ahead and the outputs waiting for their
acknowledgement are held until the commit -- and keep it flat at any rate: each record
held costs ~0.8 KiB besides its bytes (measured over 1,000,000 x 100 B on genuine Kafka
4.4.0: peak RSS 58 MiB at 5,000 records a transaction, 71-73 MiB at 20,000, 88-95 MiB
at 50,000, see ``benchmarks/README.md``).

Polls are sized here so that no poll carries a transaction past a cap or the interval:
what fits in the time left at the measured processing cost per record, in the records
left under the record cap, and in the bytes left under the byte cap at the measured
bytes per record. Records left in aiokafka's buffer cost nothing, while records polled
and not processed in time are given back and fetched again. The first poll, before
either cost is known, takes ``FIRST_CHUNK`` records (with large records the first
transaction can so pass the byte cap, by at most what the consumer has buffered:
1 MiB a partition by default).

An app that works ahead (``process_ahead``) gets each cap its config leaves unset
``AHEAD_CAPS`` times its default (``caps``). Such an app processes a transaction's
records while the one before it commits, so the record cap also bounds the work done in
one commit's time. At 20,000 records and 2 MiB, on genuine Kafka 4.4.0, the regroup's
work ahead reached the cap before the commit ended in 24 of 40 transactions, and the loop
then waited with nothing to do. Twice the caps made the regroup 1.06x, the running
count 1.23x and the window 1.18x as fast, the count and the window at the same peak RSS
(the join gained nothing and held 12-14 MiB more). The same change raised the
stateless copy's peak RSS from 67 to 75 MiB: the copy does not work ahead, so it keeps
the caps as they are (``benchmarks/README.md``, 2026-12-06). Such an app's producer
also batches up to ``AHEAD_BATCH_BYTES`` (``batch_bytes``). A cap or a batch size given
in the config, or through ``EOSFLOW_*``, is kept as given.

After a retriable failure (``TransactionError``) the record limit is halved, and each
committed transaction raises it again by ``REGROWTH``, up to the record cap.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .._config import EosConfig
from .._native import byte_count
from .._records import Record

FIRST_CHUNK = 100
"""Records in the first poll, before the processing cost is known."""
REGROWTH = 1.25
"""After a retriable failure halved the transaction's record limit, each committed
transaction raises it by a quarter, up to the record cap: a slow spell (a cold
executor, a busy cluster) does not shrink the rest of the process's transactions, while
a limit that is truly too high is approached again slowly (about three commits per
doubling) rather than failing every other transaction."""
AHEAD_CAPS = 2
"""How many times the default caps an app working ahead gets (``caps``)."""
AHEAD_BATCH_BYTES = 1_000_000
"""The producer's batch size limit where an app works ahead and its config leaves
``max_batch_bytes`` unset (``batch_bytes``), in place of the default 256 KiB: under every
broker's default ``message.max.bytes`` (1,000,012 on Kafka 2.4, 1,048,588 on 4.x)."""
_WEIGHT = 0.2  # of the newest measurement in the moving averages

log = logging.getLogger("eosflow.app")


def caps(config: EosConfig, ahead: bool) -> tuple[int, int | None]:
    """The record and byte caps of a transaction: ``config``'s, each ``AHEAD_CAPS`` times
    its default where the app works ahead (``ahead``) and the config leaves it unset."""
    records, size = config.max_records_per_txn, config.max_bytes_per_txn
    if ahead:
        given = config.model_fields_set
        if "max_records_per_txn" not in given:
            records *= AHEAD_CAPS
        if "max_bytes_per_txn" not in given and size is not None:
            size *= AHEAD_CAPS
    return records, size


def batch_bytes(config: EosConfig, ahead: bool) -> int:
    """The producer's batch size limit: ``config``'s, or ``AHEAD_BATCH_BYTES`` where the
    app works ahead (``ahead``) and the config leaves it unset.

    A batch is handed to the producer when full, and waits while its partition's previous
    one is still queued (``_aiokafka._produce``): with small batches, the outputs of a
    join -- twice its inputs' bytes -- waited 0.8 s of a 3.5 s run there. Larger batches
    end those waits, and instead the commit waits longer for the last, larger batch (the
    median commit 42-49 ms against 34-36). An app that works ahead processes the next
    transaction while that commit is out; one that does not would wait for it: the
    stateless copy was 18% slower with them (``benchmarks/README.md``, 2026-12-06)."""
    if ahead and "max_batch_bytes" not in config.model_fields_set:
        return AHEAD_BATCH_BYTES
    return config.max_batch_bytes


class Sizing:
    def __init__(self, config: EosConfig, ahead: bool = False) -> None:
        self._max_records, self._max_bytes = caps(config, ahead)
        if (self._max_records, self._max_bytes) != (
            config.max_records_per_txn,
            config.max_bytes_per_txn,
        ):  # a cap doubled: said once per engine, as the config does not show it
            log.info(
                "the app works ahead: transactions hold up to %s records and %s key+value "
                "bytes (twice the default of each cap the config leaves unset)",
                f"{self._max_records:,}",
                "any number of" if self._max_bytes is None else f"{self._max_bytes:,}",
            )
        self.limit = self._max_records  # halved after a retriable failure
        self._cost_s = 0.0  # moving average of processing time per record
        self._bytes = 0.0  # moving average of key + value bytes per record

    def chunk(self, room: int, remaining_s: float) -> int:
        """How many of ``room`` records to poll: what fits in ``remaining_s`` at the
        measured cost per record."""
        if self._cost_s <= 0:
            return min(room, FIRST_CHUNK)
        return max(1, min(room, int(remaining_s / self._cost_s)))

    def room(self, records: int, size: int) -> int:
        """How many records may still be polled: ``records`` of room under the record
        limit, fewer if the byte cap (``size`` taken so far) leaves room for fewer at the
        measured bytes per record. A poll hands over what the consumer has buffered, so
        without this one poll could take a transaction far past the byte cap."""
        cap, per_record = self._max_bytes, self._bytes
        if cap is None or per_record <= 0:
            return records
        return max(1, min(records, int((cap - size) / per_record) + 1))

    def full(self, size: int) -> bool:
        """Whether ``size`` key+value bytes reach the byte cap."""
        return self._max_bytes is not None and size >= self._max_bytes

    def count(self, records: Sequence[Record]) -> int:
        """Key + value bytes of ``records`` (0 without a byte cap: not counted then)."""
        if self._max_bytes is None:
            return 0
        size = byte_count(records)  # compiled: ~7 ns a record, ~38 in a generator
        if records:
            self._bytes = _averaged(self._bytes, size / len(records))
        return size

    def processed(self, records: int, seconds: float) -> None:
        """``records`` were processed in ``seconds``: the cost per record moves."""
        if records:
            self._cost_s = _averaged(self._cost_s, seconds / records)

    def failed(self, held: int) -> int:
        """A retriable failure of a transaction that held ``held`` records: the next
        transactions hold at most half as many. (Halving the limit alone took a
        transaction of 8 records from the 20,000 default through 12 aborts before its
        retry held fewer.)"""
        self.limit = max(1, min(self.limit, held or self.limit) // 2)
        return self.limit

    def committed(self) -> None:
        """A commit: the record limit grows back towards the record cap."""
        if self.limit < self._max_records:
            self.limit = min(self._max_records, max(self.limit + 1, int(self.limit * REGROWTH)))


def _averaged(old: float, new: float) -> float:
    return new if old <= 0 else (1 - _WEIGHT) * old + _WEIGHT * new
