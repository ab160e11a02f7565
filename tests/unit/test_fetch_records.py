"""The group consumer decodes straight into eosflow ``Record``s (``_aiokafka._fetch``);
every other consumer keeps aiokafka's ``ConsumerRecord``s."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import ConsumerRecord
from kit import create_topic

from eosflow import Record
from eosflow._aiokafka import _fetch
from eosflow.testing._ladder import Broker


async def _consume(
    boot: str, topic: str, n: int, max_records: int | None = None, **kw: object
) -> list[object]:
    c = AIOKafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False, **kw)  # type: ignore[arg-type]
    await c.start()
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got: list[object] = []
        while len(got) < n:
            batch = await c.getmany(timeout_ms=5000, max_records=max_records)
            assert batch, "no records within 5 s"
            got += batch.get(tp, [])
        return got
    finally:
        await c.stop()


async def test_the_marked_consumer_gets_records_and_others_do_not(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic = b.unique("fetch-records")
    await create_topic(b.bootstrap_servers, topic)
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await p.start()
    try:
        await p.send_and_wait(topic, b"v0", key=b"k0", partition=0, headers=[("h", b"1")])
        await p.send_and_wait(topic, b"", key=None, partition=0, timestamp_ms=1234)
    finally:
        await p.stop()

    assert _fetch.direct(), "aiokafka's fetcher builds records through the subclass"
    # one record a poll: the second resumes the fetch the first began
    marked = await _consume(
        b.bootstrap_servers, topic, 2, max_records=1, key_deserializer=_fetch.AS_RECORD
    )
    assert [type(r) for r in marked] == [Record, Record]
    first, second = marked
    assert isinstance(first, Record) and isinstance(second, Record)
    assert (first.topic, first.partition, first.offset) == (topic, 0, 0)
    assert (first.key, first.value, first.headers) == (b"k0", b"v0", (("h", b"1"),))
    assert first.timestamp > 0
    assert (second.offset, second.key, second.value, second.headers) == (1, None, b"", ())
    assert second.timestamp == 1234

    plain = await _consume(b.bootstrap_servers, topic, 2)
    assert [type(r) for r in plain] == [ConsumerRecord, ConsumerRecord]
    # the fallback, should aiokafka ever hand the marked consumer its own records
    assert list(_fetch.as_records(plain)) == marked


async def test_the_marked_consumer_skips_aborted_batches_and_markers(
    eosflow_broker: Broker,
) -> None:
    """The direct path decodes batch by batch itself (``_fetch._decode``): under
    read_committed an aborted transaction's records and every commit/abort marker stay
    out, and the offsets are the log's."""
    b = eosflow_broker
    topic = b.unique("fetch-aborted")
    await create_topic(b.bootstrap_servers, topic)
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, transactional_id=topic)
    await p.start()
    try:
        for values, commit in (([b"c0", b"c1"], True), ([b"a0", b"a1"], False), ([b"c2"], True)):
            await p.begin_transaction()
            for v in values:
                await p.send_and_wait(topic, v, key=v, partition=0)
            await (p.commit_transaction() if commit else p.abort_transaction())
    finally:
        await p.stop()
    # log: c0 c1 marker a0 a1 marker c2 marker
    want = [(0, b"c0"), (1, b"c1"), (6, b"c2")]
    for max_records in (None, 1):
        got = await _consume(
            b.bootstrap_servers,
            topic,
            3,
            max_records=max_records,
            key_deserializer=_fetch.AS_RECORD,
            isolation_level="read_committed",
        )
        assert all(type(r) is Record for r in got)
        assert [(r.offset, r.value) for r in got] == want  # type: ignore[attr-defined]
