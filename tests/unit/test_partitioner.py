"""``_aiokafka/_partitioner.py``: an output without a partition lands where
``producer.send`` would put it, with the topic's partition list built once per metadata
answer and recent keys' hashes kept. The comment above each test names the mutation
that made it fail."""

from __future__ import annotations

import random

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from kit import create_topic, eventually

from eosflow._aiokafka import _partitioner
from eosflow._aiokafka._partitioner import Partitioner, murmur2
from eosflow.testing import FakeCluster
from eosflow.testing._ladder import Broker

# The Java client's own cases (Kafka's UtilsTest.testMurmur2), as signed 32-bit values.
JAVA = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def _keys(n: int, seed: int = 5) -> list[bytes]:
    """``n`` keys of 0 to 200 bytes, a third of them repeats of earlier ones."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for _ in range(n):
        if out and rng.random() < 0.33:
            out.append(rng.choice(out))
        else:
            out.append(rng.randbytes(rng.choice([0, 1, 2, 3, 4, 7, 8, 16, 33, 128, 129, 200])))
    return out


# murmur2 is the Java client's (its published cases) and aiokafka's, at every length up
# to 70 bytes (each tail of 0 to 3 bytes, one word and many). Caught: a tail byte
# dropped, the shift of 24 as 16, the finalisation's shifts swapped.
def test_murmur2_is_the_java_clients() -> None:
    for key, signed in JAVA.items():
        assert murmur2(key) == signed & 0xFFFFFFFF
    rng = random.Random(1)
    for n in range(71):
        for _ in range(40):
            data = rng.randbytes(n)
            assert murmur2(data) == aiokafka_murmur2(data), (n, data)


# Every key goes to the partition aiokafka's own choice gives, over topics of 1, 3 and 7
# partitions, with the hash cache's generations turning over many times (64 keys a
# generation here) and keys longer than the cache keeps; ``lists`` (what
# ``_native.fill`` partitions by) agrees key by key, and gives none for another
# partitioner. The cache stays bounded: two generations, no long key. Caught: the hash
# taken without its low 31 bits, the index taken from the partition count of another
# topic, long keys kept, generations never dropped, ``lists`` for another partitioner.
async def test_keys_land_where_aiokafka_puts_them(
    eosflow_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_partitioner, "HASHED", 64)
    b = eosflow_broker
    topics = {b.unique("part-1"): 1, b.unique("part-3"): 3, b.unique("part-7"): 7}
    for topic, count in topics.items():
        await create_topic(b.bootstrap_servers, topic, partitions=count)
    producer = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await producer.start()
    try:
        part = Partitioner(producer)
        for topic in topics:
            await part.ready(topic)
        keys = _keys(3000)
        for key in keys:
            for topic in topics:
                want = producer._partition(topic, None, key, None, key, None)
                assert part.partition(topic, key, None) == want, (topic, key)
        # what send_all hands _native.fill: each topic's list, indexed by the same hash
        lists = part.lists()
        assert set(lists) == set(topics)
        for key in keys[:500]:
            for topic, listed in lists.items():
                at = (murmur2(key) & 0x7FFFFFFF) % len(listed)
                assert listed[at] == part.partition(topic, key, None), (topic, key)
        # another partitioner: no lists, every output through aiokafka's call
        other = AIOKafkaProducer(
            bootstrap_servers=b.bootstrap_servers, partitioner=lambda key, every, free: every[0]
        )
        await other.start()
        try:
            theirs = Partitioner(other)
            await theirs.ready(topic)
            assert theirs.known == {topic} and theirs.lists() == {}
        finally:
            await other.stop()
        kept = {**part._old, **part._new}
        assert len(part._old) <= 64 and len(part._new) <= 64
        assert kept and all(len(k) <= _partitioner.HASHED_KEY_BYTES for k in kept)
        # a key without bytes goes through aiokafka's call: any available partition
        topic = next(t for t, n in topics.items() if n == 7)
        assert {part.partition(topic, None, b"v") for _ in range(200)} <= set(range(7))
    finally:
        await producer.stop()


# A topic whose partition count changed is partitioned over the new count once the
# producer's metadata says so (the list is rebuilt per metadata answer), by ``partition``
# and ``lists`` alike. Caught: the list built once per topic (keys kept on the old
# partitions), in either.
async def test_a_new_partition_count_is_used_after_the_metadata_says_so(
    cluster: FakeCluster,
) -> None:
    boot = cluster.bootstrap_servers
    await create_topic(boot, "grows", partitions=3)
    producer = AIOKafkaProducer(bootstrap_servers=boot)
    admin = AIOKafkaAdminClient(bootstrap_servers=boot)
    await producer.start()
    await admin.start()
    try:
        part = Partitioner(producer)
        await part.ready("grows")
        keys = _keys(300, seed=9)
        assert {part.partition("grows", k, None) for k in keys} == {0, 1, 2}
        await admin.delete_topics(["grows"])
        await create_topic(boot, "grows", partitions=8)

        async def eight() -> bool:
            await producer.client.force_metadata_update()
            return part.partitions("grows") == set(range(8))

        await eventually(eight, what="the producer's metadata shows 8 partitions")
        listed = part.lists()["grows"]  # asked first: rebuilt for the new answer itself
        got = [part.partition("grows", k, None) for k in keys]
        assert got == [producer._partition("grows", None, k, None, k, None) for k in keys]
        assert max(got) >= 3
        assert [listed[(murmur2(k) & 0x7FFFFFFF) % len(listed)] for k in keys] == got
    finally:
        await admin.close()
        await producer.stop()
