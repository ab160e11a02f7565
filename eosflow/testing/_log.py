"""One partition's log: record batches (v2) stored as bytes, as a broker stores them.

Offsets are assigned by rewriting the batch's base offset (bytes 0-7, outside the CRC);
the rest of a producer's batch is kept verbatim, so a fetch returns exactly what was
produced. Control batches (commit/abort markers) are written here with the layout Kafka
uses, so clients filter aborted data by the same code path as against a real broker.

Idempotence follows the broker's ProducerStateManager: per producer id, the current epoch,
the last sequence and the last five batches' sequence ranges (a retried batch gets its
original offset back; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is fenced).
"""

from __future__ import annotations

import asyncio
import bisect
import struct
import time
from collections import deque
from dataclasses import dataclass, field

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from .._protocol import codes

# Offsets within the v2 batch header (see the Kafka protocol's RecordBatch layout).
_HEADER = struct.Struct(">qiibIhiqqqhii")
_HEADER_SIZE = _HEADER.size  # 61
_ATTR_OFFSET = 21
_CRC_OFFSET = 17
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_MAX_CACHED_BATCHES = 5


@dataclass(slots=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    data: bytes
    producer_id: int
    max_timestamp: int


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    last_seq: int = -1
    # (first_seq, last_seq, base_offset) of the most recent batches, oldest first
    recent: deque[tuple[int, int, int]] = field(
        default_factory=lambda: deque(maxlen=_MAX_CACHED_BATCHES)
    )


@dataclass(slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int


class PartitionLog:
    """Append-only log of one partition, with high watermark and last stable offset."""

    def __init__(self) -> None:
        self.batches: list[StoredBatch] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self._producers: dict[int, _ProducerEntry] = {}
        # producer id -> first offset of its open transaction in this partition
        self.open_txns: dict[int, int] = {}
        self.aborted: list[AbortedTxn] = []
        self._waiters: list[asyncio.Future[None]] = []
        # a stale leader's view (``FakeCluster.stale_log``): until ``_stale_until``
        # (monotonic), reads answer the ends the log had then, and nothing past them
        self._stale: tuple[int, int] | None = None
        self._stale_until = 0.0

    # --- state -----------------------------------------------------------------------

    def go_stale(self, seconds: float) -> None:
        """For ``seconds``, Fetch and ListOffsets see the log as it is now: its high
        watermark and last stable offset, nothing written later."""
        self._stale = (self.high_watermark, self.last_stable_offset)
        self._stale_until = time.monotonic() + seconds

    def answered_ends(self) -> tuple[int, int]:
        """(high watermark, last stable offset) as reads answer them: the stale view's
        while it lasts, else the log's."""
        if self._stale is not None and time.monotonic() < self._stale_until:
            return self._stale
        return self.high_watermark, self.last_stable_offset

    @property
    def last_stable_offset(self) -> int:
        if not self.open_txns:
            return self.high_watermark
        return min(self.open_txns.values())

    def producer_epoch(self, producer_id: int) -> int | None:
        entry = self._producers.get(producer_id)
        return None if entry is None else entry.epoch

    # --- writes ----------------------------------------------------------------------

    def append(self, batch: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Append one producer batch; returns (error code, base offset)."""
        if len(batch) < _HEADER_SIZE:
            return codes.CORRUPT_MESSAGE, -1
        (_, length, _, magic, crc, attrs, last_delta, _, max_ts, pid, epoch, base_seq, count) = (
            _HEADER.unpack_from(batch, 0)
        )
        if magic != 2:
            return codes.UNSUPPORTED_FOR_MESSAGE_FORMAT, -1
        if length + 12 != len(batch) or count != last_delta + 1:
            return codes.CORRUPT_MESSAGE, -1
        if calc_crc32c(bytes(memoryview(batch)[_ATTR_OFFSET:])) != crc:
            return codes.CORRUPT_MESSAGE, -1
        if attrs & _CONTROL:
            return codes.INVALID_RECORD, -1
        if pid >= 0:
            entry = self._producers.get(pid)
            if entry is not None and epoch < entry.epoch:
                return codes.INVALID_PRODUCER_EPOCH, -1
            if entry is None or epoch > entry.epoch:
                if base_seq != 0:
                    return codes.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
                entry = _ProducerEntry(epoch)
                self._producers[pid] = entry
            last_seq = base_seq + last_delta
            for first, last, base in entry.recent:
                if first == base_seq and last == last_seq:
                    return codes.NONE, base  # a retry of a batch we already have
            if base_seq != entry.last_seq + 1:
                return codes.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
            entry.last_seq = last_seq
        base = self.high_watermark
        data = bytearray(batch)
        struct.pack_into(">q", data, 0, base)
        self._store(StoredBatch(base, base + last_delta, bytes(data), pid, max_ts))
        if pid >= 0:
            self._producers[pid].recent.append((base_seq, base_seq + last_delta, base))
            if attrs & _TRANSACTIONAL:
                self.open_txns.setdefault(pid, base)
        return codes.NONE, base

    def write_marker(self, producer_id: int, epoch: int, commit: bool) -> None:
        """Write a COMMIT or ABORT control batch for ``producer_id`` and close its
        transaction in this partition (the broker's WriteTxnMarkers)."""
        first = self.open_txns.pop(producer_id, None)
        base = self.high_watermark
        data = _control_batch(base, producer_id, epoch, commit)
        self._store(StoredBatch(base, base, data, producer_id, int(time.time() * 1000)))
        if not commit and first is not None:
            self.aborted.append(AbortedTxn(producer_id, first, base))
        entry = self._producers.get(producer_id)
        if entry is not None and epoch > entry.epoch:
            # a newer epoch (transactions v2 bumps it at every end): its sequences start at 0
            self._producers[producer_id] = _ProducerEntry(epoch)
        self._wake()

    def fence_epoch(self, producer_id: int, epoch: int) -> None:
        """Remember a producer's new epoch so older epochs are rejected here too."""
        entry = self._producers.get(producer_id)
        if entry is not None and epoch > entry.epoch:
            self._producers[producer_id] = _ProducerEntry(epoch)

    def _store(self, batch: StoredBatch) -> None:
        self.batches.append(batch)
        self._bases.append(batch.base_offset)
        self.high_watermark = batch.last_offset + 1
        self._wake()

    def expire(self, cutoff_ms: int) -> int:
        """Time-based retention (``retention.ms``), as Kafka applies it to a log held in
        one segment (its default ``segment.bytes`` is 1 GiB, larger than any test log):
        once the newest record is stamped before ``cutoff_ms``, every record is deleted
        and the log starts at the high watermark; a fetch below it is
        OFFSET_OUT_OF_RANGE. Markers carry the broker's clock, so a log holding one
        never expires whole. Returns how many offsets were deleted."""
        if not self.batches or self.open_txns:
            return 0
        if max(b.max_timestamp for b in self.batches) >= cutoff_ms:
            return 0
        deleted = self.high_watermark - self.log_start_offset
        self.batches.clear()
        self._bases.clear()
        self.aborted.clear()
        self.log_start_offset = self.high_watermark
        return deleted

    def delete_before(self, offset: int) -> int:
        """DeleteRecords: the log starts at ``offset`` (at most the high watermark) unless
        it starts later already; batches wholly below it are dropped. Returns the start."""
        if offset <= self.log_start_offset:
            return self.log_start_offset
        self.log_start_offset = offset
        keep = 0
        while keep < len(self.batches) and self.batches[keep].last_offset < offset:
            keep += 1
        if keep:
            del self.batches[:keep]
            del self._bases[:keep]
        return offset

    # --- reads -----------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, read_committed: bool, must_return_one: bool
    ) -> tuple[int, bytes, list[AbortedTxn]]:
        """Batches from ``offset`` up to the high watermark (or the LSO for
        read_committed), at most ``max_bytes`` unless ``must_return_one`` and the first
        batch alone is larger (KIP-74). Returns (error code, bytes, aborted txns in range)."""
        hw, lso = self.answered_ends()
        if offset < self.log_start_offset or offset > hw:
            return codes.OFFSET_OUT_OF_RANGE, b"", []
        limit = lso if read_committed else hw
        idx = bisect.bisect_right(self._bases, offset) - 1
        idx = max(idx, 0)
        out: list[bytes] = []
        size = 0
        last = offset - 1
        for batch in self.batches[idx:]:
            if batch.base_offset >= limit:
                break
            if batch.last_offset < offset:
                continue
            if size + len(batch.data) > max_bytes and (out or not must_return_one):
                break
            out.append(batch.data)
            size += len(batch.data)
            last = batch.last_offset
        aborted: list[AbortedTxn] = []
        if read_committed and out:
            aborted = [
                a for a in self.aborted if a.last_offset >= offset and a.first_offset <= last
            ]
        return codes.NONE, b"".join(out), aborted

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record stamped at or after ``timestamp``
        (control records are not data), or (-1, -1), as Kafka's ListOffsets answers."""
        for batch in self.batches:
            if batch.max_timestamp >= timestamp:
                rb = DefaultRecordBatch(batch.data)
                if rb.is_control_batch:
                    continue
                for rec in rb:
                    if rec.timestamp >= timestamp:
                        return rec.offset, rec.timestamp
        return -1, -1

    # --- long polling ------------------------------------------------------------------

    def waiter(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


def _control_batch(base_offset: int, producer_id: int, epoch: int, commit: bool) -> bytes:
    """A control batch holding one COMMIT (type 1) or ABORT (type 0) marker."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)  # version, coordinator epoch
    builder.append(0, timestamp=int(time.time() * 1000), key=key, value=value, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    attrs = struct.unpack_from(">h", data, _ATTR_OFFSET)[0] | _TRANSACTIONAL | _CONTROL
    struct.pack_into(">h", data, _ATTR_OFFSET, attrs)
    struct.pack_into(">I", data, _CRC_OFFSET, calc_crc32c(bytes(data[_ATTR_OFFSET:])))
    return bytes(data)
