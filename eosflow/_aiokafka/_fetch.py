"""Consumed records decoded straight into eosflow's ``Record``.

aiokafka turns every consumed record into a ``ConsumerRecord`` (a dataclass of eleven
fields, its key and value passed through the deserializers and measured), and eosflow
then built a ``Record`` from each: two objects per record where one will do. Measured
over 1,000,000 records of 100 B from genuine Kafka 4.4.0 in one process: 1.43 s of CPU
for aiokafka's ``getmany`` alone, 1.94 s with eosflow's conversion, 1.14 s decoding into
``Record`` directly (``benchmarks/README.md``, "Where the time goes").

How: aiokafka's fetcher names the class ``PartitionRecords`` at module level when a fetch
answer arrives, and each instance decodes its fetch in the generator its
``_unpack_records`` returns. ``install()`` puts a subclass under that name whose
generator, for a consumer whose key deserializer is ``AS_RECORD`` (the group consumer of
``consumer_for``), is eosflow's own ``_decode``: aiokafka's batch-by-batch rules (CRC,
aborted transactions under read_committed, control batches, the next fetch offset), with
the ``Record`` built in the loop instead of through a method call per record -- and whose
iterator, for that consumer, is that generator itself. Every other consumer in the
process, eosflow's own or the user's, gets aiokafka's records unchanged. Nothing else in
aiokafka reads the records it returns from ``getmany``. Measured over 1,000,000 records
on genuine 4.4.0: ~6% more throughput than building each ``Record`` in
``_consumer_record`` (4 alternating runs, 287k -> 305k rec/s median).

Failure mode: if a later aiokafka stopped calling ``_unpack_records``, the marked
consumer would hand back ``ConsumerRecord``s (its key passed through ``AS_RECORD``,
which returns it as is). ``as_records`` converts those, so records are never wrong, only
slower; ``tests/unit/test_fetch_records.py`` pins that the direct path is the one taken
with the aiokafka eosflow supports.

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

from collections.abc import Collection, Iterator, Sequence
from typing import Any

from aiokafka.consumer import consumer as _consumer
from aiokafka.consumer import fetcher as _fetcher
from aiokafka.errors import CorruptRecordException

from .._records import Record


def AS_RECORD(key: bytes | None) -> bytes | None:
    """The group consumer's key deserializer: marks it for ``Record``s (and returns the
    key unchanged, should aiokafka ever call it)."""
    return key


_Base: Any = _fetcher.PartitionRecords


class _RecordsOrConsumerRecords(_Base):  # type: ignore[misc]
    """aiokafka's ``PartitionRecords``, making eosflow ``Record``s for a marked consumer."""

    def __iter__(self) -> Any:
        # aiokafka's FetchResult.getall iterates this object: hand the marked consumer's
        # loop the record generator itself, so no Python-level __next__ runs per record
        # (0.13 s of CPU per 1,000,000 records)
        if self._key_deserializer is AS_RECORD:
            records = self._records_iterator
            return records if records is not None else iter(())
        return self

    def _unpack_records(self) -> Any:
        # called once, by aiokafka's __init__, for the generator of this fetch's records
        if self._key_deserializer is AS_RECORD:
            return self._decode()
        return super()._unpack_records()

    def _decode(self) -> Iterator[Record]:
        """aiokafka's ``_unpack_records`` for the marked consumer, building each
        ``Record`` in its own loop (no method call per record: ~0.1 us a record less).
        Batch by batch as aiokafka does: a corrupt batch raises; under read_committed
        the batches of aborted transactions are skipped (aiokafka's own bookkeeping of
        the fetch's aborted transactions, ``_consume_aborted_up_to`` and
        ``_contains_abort_marker``); control batches are skipped; records below the
        fetch offset (the head of a batch fetched again) are skipped; the next fetch
        offset follows every record handed over, then the batch's end."""
        tp, batches = self._tp, self._records
        topic, partition = tp.topic, tp.partition
        committed_only = self._isolation_level == _fetcher.READ_COMMITTED
        while batches.has_next():
            batch = batches.next_batch()
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
            for record in batch:
                offset = record.offset
                if offset < self.next_fetch_offset:
                    continue
                headers = record.headers
                self.next_fetch_offset = offset + 1
                yield Record(
                    topic,
                    partition,
                    offset,
                    record.key,
                    record.value,
                    tuple(headers) if headers else (),
                    record.timestamp,
                )
            self.next_fetch_offset = batch.next_offset


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
    s once its polls also took every fetched record (``Sync.drains``)."""

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
