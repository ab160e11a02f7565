"""The partition of an output produced without one: the one ``producer.send`` would pick.

eosflow hands whole batches to ``send_batch``, which needs the partition up front, so the
choice is made here, exactly as aiokafka's ``DefaultPartitioner`` makes it (the Java
client's for a keyed record): murmur2 of the key, its low 31 bits, modulo the topic's
partition count, indexing the topic's partitions as the producer's metadata lists them;
a record without a key goes to any available partition.

**Why not aiokafka's own call.** ``producer._partition`` builds two sets and two lists
from the metadata for every record, and its murmur2 is pure Python, a few operations per
byte: together ~3 us of a pass-through's ~7 us per record, measured with cProfile on
genuine Kafka (``benchmarks/README.md``). Here, for aiokafka's default partitioner:

- the topic's partition list is built once per metadata answer (aiokafka replaces its
  per-topic partition map whole on each answer, so the map's identity says whether the
  list is current);
- murmur2 is ``_native``'s: compiled (in Python, reading the key four bytes at a time
  with ``struct``, about a third faster than aiokafka's, where the extension is not
  built);
- each key's hash is kept for the keys seen lately: two generations of at most
  ``HASHED`` keys of at most ``HASHED_KEY_BYTES`` bytes each; a key found in the older
  one moves to the newer, and a full newer generation replaces the older. So a key
  space that fits pays a dict lookup per record, a larger one (keys seen once) a lookup
  and an insert more than the hash, and the cache never holds more than 2 x ``HASHED``
  keys: 7.3 MiB for 8-byte keys, 14.8 MiB for 128-byte ones (measured, tracemalloc).
  With ``_native`` compiled, ``send_all`` partitions most outputs in ``_native.fill``
  from ``lists`` (murmur2 in C costs less than the lookup), and the cache serves only
  the outputs it leaves to ``partition``.

A producer with another partitioner (eosflow sets none; a test might) goes through
aiokafka's call as before. ``tests/unit/test_partitioner.py`` checks the hash against
aiokafka's over keys of every length up to 70 bytes, and the cache's bound.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from .._native import murmur2

HASHED = 32_768  # keys per generation of the hash cache
HASHED_KEY_BYTES = 128  # longer keys are hashed every time, not kept


def default_partition(key: bytes, partitions: int) -> int:
    """The partition of ``partitions`` that Kafka's default partitioner gives a record
    keyed ``key`` (the Java client's, franz-go's and aiokafka's, and ``Partitioner``'s):
    murmur2 of the key, its low 31 bits, modulo the count."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


async def wait_on_metadata(client: Any, topic: str) -> None:
    """Wait until ``client`` has ``topic``'s metadata, tracking the topic from now on.
    aiokafka's ``_wait_on_metadata`` returns at once for a topic the last full metadata
    answer happened to hold, without tracking it; once any topic is tracked, refreshes
    ask only for the tracked ones and the untracked topic vanishes from the metadata
    (its partitioner then fails). Seen when a stateful app tracked its changelogs."""
    await client.add_topic(topic)
    await client._wait_on_metadata(topic)


class Partitioner:
    """The partition ``producer.send`` would pick for a record without one (see the
    module) over the topic's current metadata. ``ready`` fetches a topic's metadata;
    topics in ``known`` have it (checked without a coroutine per record on the hot
    path)."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer
        self.known: set[str] = set()
        self._default = type(producer._partitioner) is DefaultPartitioner
        self._lists: dict[str, tuple[object, list[int]]] = {}  # topic -> (its map, list)
        self._new: dict[bytes, int] = {}  # key -> its hash's low 31 bits
        self._old: dict[bytes, int] = {}

    async def ready(self, topic: str) -> None:
        if topic not in self.known:
            await wait_on_metadata(self._producer.client, topic)
            self.known.add(topic)

    def lists(self) -> dict[str, list[int]]:
        """The partitions of each topic in ``known`` as ``partition`` indexes them, for
        the topics its hash decides now (``_native.fill`` partitions outputs with them):
        none for a producer with another partitioner, nor for a topic the metadata has
        lost. Valid until the next await (a metadata answer replaces them)."""
        if not self._default:
            return {}
        found: dict[str, list[int]] = {}
        for topic in self.known:
            listed = self._listed(topic)
            if listed is not None:
                found[topic] = listed
        return found

    def _listed(self, topic: str) -> list[int] | None:
        """The topic's partitions as aiokafka's ``_partition`` indexes them (the set's
        order), rebuilt when a metadata answer replaced its map; None while the metadata
        does not know the topic."""
        current = self._producer.client.cluster._partitions.get(topic)
        listed = self._lists.get(topic)
        if listed is None or listed[0] is not current:
            if not current:
                return None
            listed = self._lists[topic] = (current, list(set(current)))
        return listed[1]

    def answered_since(self, when_ms: float) -> bool:
        """Whether a metadata answer came back since ``when_ms`` (epoch milliseconds)."""
        cluster = self._producer.client.cluster
        return bool(cluster._last_successful_refresh_ms >= when_ms)

    def partition(self, topic: str, key: object, value: object) -> int:
        """The partition of a record of ``topic`` (key and value: bytes, once normalised)."""
        if type(key) is bytes and self._default:
            partitions = self._listed(topic)
            if partitions is None:  # unknown to the metadata: aiokafka's call says so
                return self._aiokafka(topic, key, value)
            h = self._new.get(key)  # a key seen lately: no call
            return partitions[(self._hash_missed(key) if h is None else h) % len(partitions)]
        return self._aiokafka(topic, key, value)

    def _hash_missed(self, key: bytes) -> int:
        """The hash of a key the newer generation does not hold (``partition`` looked)."""
        h = self._old.get(key)
        if h is None:
            h = murmur2(key) & 0x7FFFFFFF
            if len(key) > HASHED_KEY_BYTES:
                return h
        if len(self._new) >= HASHED:
            self._old, self._new = self._new, {}
        self._new[key] = h
        return h

    def _aiokafka(self, topic: str, key: object, value: object) -> int:
        return int(self._producer._partition(topic, None, key, value, key, value))

    def partitions(self, topic: str) -> set[int]:
        """The topic's partitions as the producer's metadata knows them (after ``ready``)."""
        return set(self._producer.client.cluster.partitions_for_topic(topic) or ())
