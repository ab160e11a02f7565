"""Consumed records decoded straight into eosflow's ``Record``.

aiokafka turns every consumed record into a ``ConsumerRecord`` (a dataclass of eleven
fields, its key and value passed through the deserializers and measured), and eosflow
then built a ``Record`` from each: two objects per record where one will do. Measured
over 1,000,000 records of 100 B from genuine Kafka 4.4.0 in one process: 1.43 s of CPU
for aiokafka's ``getmany`` alone, 1.94 s with eosflow's conversion, 1.14 s decoding into
``Record`` directly (``benchmarks/README.md``, "Where the time goes").

How: aiokafka's fetcher names its classes at module level when a fetch answer arrives
(``MemoryRecords`` for the answer's records, ``PartitionRecords`` for one partition's,
``FetchResult`` for what ``getmany`` takes from), and ``install()`` puts a subclass
under the first two names and a ``getall`` of its own on the third. For a consumer whose
key deserializer is ``AS_RECORD`` (the group consumer of ``consumer_for``) the records
are decoded batch by batch by aiokafka's rules
(CRC, aborted transactions under read_committed, control batches, records below the
fetch offset, the next fetch offset), an uncompressed v2 batch by
``_native.decode_batch`` straight from the answer's bytes (``_Kept`` keeps them) into
``Record``s, any other through aiokafka's own records; and ``getall`` takes a run of
them at once (``take``: a slice of the batch in hand) where aiokafka's loop took them
one by one from a generator, moving the position exactly as that loop did. Every other
consumer in the process, eosflow's own or the user's, gets aiokafka's records unchanged
(``_Kept`` only keeps one reference more). Measured path alone (7,800 records of 100 B
in 60 batches, best of 9): 142-149 ns a record against 274-311 with the generator this
replaced (``benchmarks/README.md``); that generator was itself ~6% more throughput than
building each ``Record`` from aiokafka's ``ConsumerRecord``.

Failure mode: if a later aiokafka stopped calling ``_unpack_records``, the marked
consumer would hand back ``ConsumerRecord``s (its key passed through ``AS_RECORD``,
which returns it as is). ``as_records`` converts those, so records are never wrong, only
slower; without ``_getall`` in place, aiokafka's own ``getall`` takes them one by one
from ``take``. ``tests/unit/test_fetch_records.py`` pins that the direct path is the
one taken with the aiokafka eosflow supports, and holds it to aiokafka's own over random
fetches (aborted transactions, markers, gzip batches, compacted batch ends).

**A fetch that leaves out partitions still holding records waits briefly at the broker.**
aiokafka keeps one fetch in flight per broker and leaves out of it every partition whose
fetched records are not all taken yet. When a partition is read to its end (no new
input, or the first of several to finish a backlog) while others still hold records,
the fetch holds that partition alone, and the broker keeps it for the consumer's
``fetch_max_wait_ms`` (500 ms) for want of data; the busy partitions, once taken, wait
behind it for their next records. Measured on genuine 4.4.0 (300,000 Avro records over 3
partitions, ``benchmarks typed``): after the first partition ended, fetches of it alone
held 500 ms each; with the consumer's wait set to 20 ms the run took 4.5 s instead of
5.7 s, and 4.6 s instead of 7.3 s with ``process_ahead``, which ended partitions further
apart (``benchmarks/README.md``). So for the marked consumer
``_Fetcher`` sends each fetch to a broker from which it holds records not taken (or
where a partition is paused, which is left out alike) with a wait of at most
``SHORT_FETCH_WAIT_MS``; other fetches, and all of them once nothing is held or paused,
wait as configured (an idle app long-polls as before). The cost: while records of a
broker wait to be taken -- a busy app, or one whose processing has stalled -- or one of
its partitions is paused, its partitions read to their end are asked for every 20 ms
(after aiokafka's 100 ms prefetch backoff for held records).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from aiokafka.consumer import consumer as _consumer
from aiokafka.consumer import fetcher as _fetcher
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch as _DefaultBatch

from .._native import COMPILED, Corrupt, decode_batch
from .._records import Record


def AS_RECORD(key: bytes | None) -> bytes | None:
    """The group consumer's key deserializer: marks it for ``Record``s (and returns the
    key unchanged, should aiokafka ever call it)."""
    return key


_Base: Any = _fetcher.PartitionRecords


class _Kept(_fetcher.MemoryRecords):  # type: ignore[misc]
    """aiokafka's ``MemoryRecords`` of a fetch, keeping the fetch's bytes (``raw``) for
    ``decode_batch``: the same object aiokafka holds, one reference more."""

    __slots__ = ("raw",)

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.raw = data


class _RecordsOrConsumerRecords(_Base):  # type: ignore[misc]
    """aiokafka's ``PartitionRecords``, making eosflow ``Record``s for a marked consumer:
    ``take`` hands them over a run at a time (``_getall``), one by one through
    the iterator aiokafka's own calls use."""

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        if self._key_deserializer is not AS_RECORD:
            return super().__next__()
        taken = self.take(1)  # aiokafka's getone, or its getall without _getall
        if not taken:
            raise StopIteration
        return taken[0]

    def _unpack_records(self) -> Any:
        # called once, by aiokafka's __init__, for the generator of this fetch's records;
        # a marked consumer's need none: ``take`` keeps its state in plain fields, so
        # nothing refers back to this object (a generator would, until exhausted: a
        # cycle holding the fetch's bytes until the collector runs)
        if self._key_deserializer is not AS_RECORD:
            return super()._unpack_records()
        self._decoded: list[Record] = []  # the batch in hand, decoded
        self._at = 0  # of those, how many are handed over
        self._batch_end: int | None = None  # its next offset, once all are handed over
        self._ended = False
        raw = self._records.raw if COMPILED and type(self._records) is _Kept else None
        self._raw = raw if type(raw) is bytes else None  # decode_batch reads bytes
        self._pos = 0  # where the next batch starts in it
        return None

    def take(self, limit: int | None) -> list[Record]:
        """Up to ``limit`` records (None: all), in order; ``next_fetch_offset`` follows
        the last one handed over, then its batch's end as the next is begun (as
        aiokafka's generator moves it). ``ended`` once none is left."""
        out: list[Record] = []
        if self._ended or (limit is not None and limit <= 0):
            return out
        while True:
            decoded, at = self._decoded, self._at
            if at < len(decoded):
                stop = len(decoded) if limit is None else min(len(decoded), at + limit - len(out))
                run = decoded[at:stop]
                out += run
                self._at = stop
                self.next_fetch_offset = run[-1].offset + 1
                if limit is not None and len(out) >= limit:
                    return out
            if self._batch_end is not None:  # the batch is all handed over: past its end
                self.next_fetch_offset = self._batch_end
                self._batch_end = None
            try:
                records = self._next_batch()
            except BaseException:
                # as aiokafka's generator, closed by the error: nothing more is taken from
                # this fetch, and what it held is fetched again from the position
                self._ended = True
                raise
            if records is None:
                self._ended = True
                return out
            self._decoded, self._at = records, 0

    @property
    def ended(self) -> bool:
        return self._ended

    def _next_batch(self) -> list[Record] | None:
        """The next batch of the fetch as its records past the fetch offset (None at the
        end), batch by batch as aiokafka decodes them: a corrupt batch raises; under
        read_committed the batches of aborted transactions are skipped (aiokafka's own
        bookkeeping of the fetch's aborted transactions, ``_consume_aborted_up_to`` and
        ``_contains_abort_marker``); control batches are skipped. An uncompressed v2
        batch is decoded by ``_native.decode_batch`` from the fetch's bytes; any other
        record by record through aiokafka."""
        tp, batches, raw = self._tp, self._records, self._raw
        committed_only = self._isolation_level == _fetcher.READ_COMMITTED
        while batches.has_next():
            batch = batches.next_batch()
            start = self._pos
            if raw is not None:
                self._pos += 12 + int.from_bytes(raw[start + 8 : start + 12], "big", signed=True)
            if self._check_crcs and not batch.validate_crc():
                raise CorruptRecordException(f"Invalid CRC - {tp}")
            if committed_only and batch.producer_id is not None:
                self._consume_aborted_up_to(batch.base_offset)
                if batch.is_control_batch and self._contains_abort_marker(batch):
                    self._aborted_producers.discard(batch.producer_id)
                if batch.is_transactional and batch.producer_id in self._aborted_producers:
                    self.next_fetch_offset = batch.next_offset
                    continue
            if batch.is_control_batch:
                self.next_fetch_offset = batch.next_offset
                continue
            floor = self.next_fetch_offset
            if raw is not None and type(batch) is _DefaultBatch and batch.compression_type == 0:
                try:
                    records = decode_batch(raw, start, tp.topic, tp.partition, floor)
                except Corrupt as exc:
                    raise CorruptRecordException(f"{exc} - {tp}") from None
            else:
                records = []
                for record in batch:
                    offset = record.offset
                    if offset < floor:  # below the fetch offset, or not past the last kept
                        continue
                    floor = offset + 1
                    headers = record.headers
                    records.append(
                        Record(
                            tp.topic,
                            tp.partition,
                            offset,
                            record.key,
                            record.value,
                            tuple(headers) if headers else (),
                            record.timestamp,
                        )
                    )
            self._batch_end = batch.next_offset
            return records
        return None


_aiokafka_getall = _fetcher.FetchResult.getall


def _getall(self: Any, max_records: int | None = None) -> Any:
    """aiokafka's ``FetchResult.getall``; for a marked consumer's records, a run of them
    taken at once (``take``) instead of one by one in aiokafka's loop, the position moved
    as that loop moves it. (A method put on aiokafka's class, not a subclass: aiokafka
    tells results from errors by ``type(...) is FetchResult``, so results made before
    eosflow was imported stay results.)"""
    records: Any = self._partition_records
    if type(records) is not _RecordsOrConsumerRecords or records._key_deserializer is not AS_RECORD:
        return _aiokafka_getall(self, max_records)
    if not self.check_assignment(self._topic_partition) or not self.has_more():
        return []
    taken = records.take(max_records)
    self._update_position()
    if records.ended:
        self._partition_records = None
    return taken


SHORT_FETCH_WAIT_MS = 20
"""How long the group consumer's fetch to a broker may wait there while the consumer has
other partitions of that broker to serve: some hold fetched records not taken yet, or
some are paused (``_Fetcher``)."""


class _Fetcher(_fetcher.Fetcher):  # type: ignore[misc]
    """aiokafka's ``Fetcher``; for a marked consumer, a fetch to a broker with partitions
    left out of it -- their fetched records not all taken, or paused -- waits at most
    ``SHORT_FETCH_WAIT_MS`` there (see the module). Fetches to other brokers wait as
    configured.

    Paused partitions are left out the same way: a join (``_state._sync`` pauses a
    partition whose buffer is full) of 1,000,000 orders on genuine Kafka 4.4.0 spent 4.7
    to 5.2 s of its ~19 s in polls that returned nothing while a resumed partition waited
    behind a fetch held for the others; with the wait cut, 0.9 to 1.5 s, and 0.1 to 0.2
    s once its polls also took every fetched record (``Sync.takes``, later at most
    5,000 a poll)."""

    def _get_actions_per_node(self, assignment: Any) -> Any:
        actions = super()._get_actions_per_node(assignment)
        if self._key_deserializer is AS_RECORD:
            left_out = set(self._records)
            left_out.update(tp for tp in assignment.tps if assignment.state_value(tp).paused)
            if left_out:
                shorten(actions[0], {self._select_read_replica(tp) for tp in left_out})
        return actions


def shorten(requests: Sequence[tuple[int, Any]], held: Collection[int]) -> None:
    """Cut to ``SHORT_FETCH_WAIT_MS`` the wait at the broker of each of ``requests``
    (aiokafka's ``(node id, FetchRequest)``) whose broker is in ``held``."""
    for node_id, request in requests:
        if node_id in held:
            request._max_wait_ms = min(request._max_wait_ms, SHORT_FETCH_WAIT_MS)


def install() -> None:
    """Put the subclasses in place (idempotent; on import of the adapter)."""
    if _fetcher.PartitionRecords is not _RecordsOrConsumerRecords:
        _fetcher.PartitionRecords = _RecordsOrConsumerRecords
    if _fetcher.MemoryRecords is not _Kept:
        _fetcher.MemoryRecords = _Kept
    if _fetcher.FetchResult.getall is not _getall:
        _fetcher.FetchResult.getall = _getall
    if _consumer.Fetcher is not _Fetcher:
        _consumer.Fetcher = _Fetcher


def direct() -> bool:
    """Whether marked consumers get ``Record``s from aiokafka itself and fetches that
    wait briefly while records are held or partitions paused (for the tests): the
    subclasses are in place and aiokafka's ``PartitionRecords`` still has the hooks
    they rely on."""
    hooks = ("_unpack_records", "_consume_aborted_up_to", "_contains_abort_marker")
    return (
        _fetcher.PartitionRecords is _RecordsOrConsumerRecords
        and _fetcher.MemoryRecords is _Kept
        and _fetcher.FetchResult.getall is _getall
        and _consumer.Fetcher is _Fetcher
        and all(hasattr(_Base, h) for h in hooks)
    )


def as_records(msgs: Sequence[Any]) -> Sequence[Record]:
    """``msgs`` from a marked consumer's ``getmany`` as ``Record``s: as they are on the
    direct path, converted one by one otherwise."""
    if not msgs or type(msgs[0]) is Record:
        return msgs
    return [
        Record(m.topic, m.partition, m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp)
        for m in msgs
    ]


install()
