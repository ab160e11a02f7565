"""Consumed records decoded straight into eosflow's ``Record``.

aiokafka turns every consumed record into a ``ConsumerRecord`` (a dataclass of eleven
fields, its key and value passed through the deserializers and measured), and eosflow
then built a ``Record`` from each: two objects per record where one will do. Measured
over 1,000,000 records of 100 B from genuine Kafka 4.4.0 in one process: 1.43 s of CPU
for aiokafka's ``getmany`` alone, 1.94 s with eosflow's conversion, 1.14 s decoding into
``Record`` directly (``benchmarks/README.md``, "Where the time goes").

How: aiokafka builds each record in ``PartitionRecords._consumer_record``, and its
fetcher names the class ``PartitionRecords`` at module level when a fetch answer
arrives. ``install()`` puts a subclass under that name whose ``_consumer_record`` builds a
``Record`` -- only for a consumer whose key deserializer is ``AS_RECORD`` (the group
consumer of ``consumer_for``) -- and whose iterator, for that consumer, is the record
generator itself. Every other consumer in the process, eosflow's own or the
user's, gets aiokafka's records unchanged. Nothing else in aiokafka reads the records it
returns from ``getmany``.

Failure mode: if a later aiokafka stopped calling ``_consumer_record``, the marked
consumer would hand back ``ConsumerRecord``s (its key passed through ``AS_RECORD``,
which returns it as is). ``as_records`` converts those, so records are never wrong, only
slower; ``tests/unit/test_fetch_records.py`` pins that the direct path is the one taken
with the aiokafka eosflow supports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka.consumer import fetcher as _fetcher

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

    def _consumer_record(self, tp: Any, record: Any) -> Any:
        if self._key_deserializer is not AS_RECORD:
            return super()._consumer_record(tp, record)
        headers = record.headers
        return Record(
            tp.topic,
            tp.partition,
            record.offset,
            record.key,
            record.value,
            tuple(headers) if headers else (),
            record.timestamp,
        )


def install() -> None:
    """Put the subclass in place (idempotent; on import of the adapter)."""
    if _fetcher.PartitionRecords is not _RecordsOrConsumerRecords:
        _fetcher.PartitionRecords = _RecordsOrConsumerRecords


def direct() -> bool:
    """Whether marked consumers get ``Record``s from aiokafka itself (for the test)."""
    return _fetcher.PartitionRecords is _RecordsOrConsumerRecords and hasattr(
        _Base, "_consumer_record"
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
