"""``Placement``: keys of co-partitioned topics where Kafka's default partitioner puts
them, checked on a sample of the records read.

A table join (and a stream-stream join, ``copartitioned``) reads partition p of every
topic of its task together, so a key must sit in the same partition number in each:
the one Kafka's default partitioner gives it (murmur2 of the key, as the Java client,
franz-go, aiokafka and eosflow's own outputs place it). A topic whose producer used
another -- librdkafka's default ``consistent_random`` is CRC32 -- holds keys elsewhere,
and the join would silently miss their rows: only partition counts are checked at
start. So the first ``FIRST`` records of each partition read, and one in
``EVERY`` after them, are checked; one out of place stops the app with a line naming
the topic, the partition, the offset and the partitioner to produce with. Records
without a key are not joined, and a topic of one partition cannot misplace one: neither
is checked. The cost: a murmur2 per checked record, none for the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import _aiokafka as ak
from .._errors import FatalError
from .._records import Partition, Record

FIRST = 16  # records checked at the start of each partition read (keyless ones skipped)
EVERY = 1024  # then one record in this many


class Placement:
    def __init__(self) -> None:
        self._counts: dict[str, int] = {}  # topic -> partitions; none known: nothing checked
        self._read: dict[Partition, int] = {}  # records of each partition seen so far

    def expect(self, counts: Mapping[str, int]) -> None:
        """The co-partitioned topics' partition counts (known once the app started)."""
        self._counts = {t: n for t, n in counts.items() if n > 1}

    def check(self, run: Sequence[Record]) -> None:
        """Check the sampled records of ``run`` (one partition's, in offset order)."""
        first = run[0]
        n = self._counts.get(first.topic)
        if n is None:
            return
        where = (first.topic, first.partition)
        seen = self._read.get(where, 0)
        self._read[where] = seen + len(run)
        picks = list(range(max(0, min(FIRST - seen, len(run)))))
        picks += range((-seen) % EVERY, len(run), EVERY)
        for i in picks:
            record = run[i]
            key = record.key
            if key is not None and ak.default_partition(key, n) != record.partition:
                raise FatalError(
                    f"{record.topic}[{record.partition}] holds key {key[:40]!r} at offset "
                    f"{record.offset}, which Kafka's default partitioner puts in partition "
                    f"{ak.default_partition(key, n)} of {n}: a co-partitioned topic must "
                    "be produced with it (murmur2 of the key; librdkafka: "
                    "partitioner=murmur2_random), or its joins miss rows"
                )
