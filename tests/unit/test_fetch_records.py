"""The group consumer decodes straight into eosflow ``Record``s (``_aiokafka._fetch``);
every other consumer keeps aiokafka's ``ConsumerRecord``s."""

from __future__ import annotations

import gc
import random
import weakref
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.consumer.fetcher import FetchResult
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import ConsumerRecord
from kit import create_topic

from eosflow import Record, _native
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
    """The direct path decodes batch by batch itself (``_fetch._decoded_batches``): under
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


def _fetch_bytes(rng: random.Random) -> tuple[bytes, list[tuple[int, int]]]:
    """A fetch answer's records as a broker could send them, with its aborted
    transactions: committed and aborted transactions of two producers, their commit and
    abort markers (control batches), non-transactional batches, gzip batches, compacted
    gaps between batches and at their ends (a batch's last offset past its last
    record's), and a partial batch at the end."""
    out, aborted, offset = bytearray(), [], rng.randrange(0, 1000)

    def batch(
        records: list[tuple[bytes | None, bytes | None]],
        pid: int,
        gzip: bool = False,
        control: bool = False,
    ) -> None:
        nonlocal offset
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=1 if gzip else 0,
            is_transactional=int(pid >= 0),
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=0 if pid >= 0 else -1,
            batch_size=1 << 20,
        )
        for i, (key, value) in enumerate(records):
            headers = [("h", b"1")] if rng.random() < 0.2 else []
            builder.append(
                i, timestamp=1_700_000_000_000 + offset + i, key=key, value=value, headers=headers
            )
        raw = bytearray(builder.build())
        raw[0:8] = offset.to_bytes(8, "big")
        tail = 0 if control else rng.choice([0, 0, 0, 3])  # its last records compacted away
        last = int.from_bytes(raw[23:27], "big") + tail
        raw[23:27] = last.to_bytes(4, "big")
        if control:
            raw[21:23] = (int.from_bytes(raw[21:23], "big") | 0x20).to_bytes(2, "big")
        raw[17:21] = calc_crc32c(bytes(raw[21:])).to_bytes(4, "big")
        out.extend(raw)
        offset += last + 1 + rng.choice([0, 0, 0, 2])  # sometimes a gap between batches

    for _ in range(rng.randrange(3, 12)):
        n = rng.randrange(1, 40)
        records = [
            (rng.choice([None, b"k%d" % i]), rng.randbytes(rng.randrange(0, 90))) for i in range(n)
        ]
        kind = rng.choice(["plain", "commit", "abort", "gzip"])
        if kind == "plain":
            batch(records, -1)
        elif kind == "gzip":
            batch(records, -1, gzip=True)
        else:
            pid = rng.choice([7, 8])
            if kind == "abort":
                aborted.append((pid, offset))
            batch(records, pid)
            marker = b"\x00\x00\x00\x00" if kind == "abort" else b"\x00\x00\x00\x01"
            batch([(marker, b"\x00\x00\x00\x00\x00\x00")], pid, control=True)
    whole = bytes(out)
    return whole + whole[: rng.randrange(0, 61)], aborted  # a partial batch at the end


# Over random fetches -- committed and aborted transactions, markers, gzip batches,
# compacted gaps and batch ends, a fetch offset inside a batch, a partial batch at the
# end -- taken in random runs (``max_records``), the direct path hands over exactly the
# records, and leaves exactly the fetch position after each run, that aiokafka's own
# PartitionRecords gives through its generator; the compiled batch decoder is used. Caught: the
# batch's end applied before its last record was taken (the position past records not
# handed over), records below the fetch offset kept, an aborted batch kept.
@pytest.mark.parametrize("seed", range(20))
def test_the_direct_path_takes_what_aiokafkas_generator_gives(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    raw, aborted = _fetch_bytes(rng)
    tp = TopicPartition("t", 2)
    start = int.from_bytes(raw[:8], "big") + rng.randrange(0, 5)  # maybe inside a batch
    decoded = []
    monkeypatch.setattr(
        _fetch, "decode_batch", lambda *a: decoded.append(1) or _native.decode_batch(*a)
    )

    def theirs_and_ours() -> tuple[Any, Any]:
        theirs = _fetch._Base(tp, MemoryRecords(raw), list(aborted), start, None, None, True, 1)
        ours = _fetch._RecordsOrConsumerRecords(
            tp, _fetch._Kept(raw), list(aborted), start, _fetch.AS_RECORD, None, True, 1
        )
        return theirs, ours

    theirs, ours = theirs_and_ours()
    while True:
        limit = rng.choice([None, 1, 2, 7, 30])
        want: list[Any] = []
        ended = True
        for msg in theirs:
            want.append(msg)
            if limit is not None and len(want) >= limit:
                ended = False
                break
        got = ours.take(limit)
        assert got == list(_fetch.as_records(want))
        assert ours.next_fetch_offset == theirs.next_fetch_offset
        assert ours.ended == ended
        if ended:
            break
    assert decoded, "no batch went through the compiled decoder"


def _legacy_fetch(rng: random.Random, magic: int) -> bytes:
    """A fetch of v0 or v1 message sets (old topics' records), some gzip-wrapped, with
    gaps, and a partial one at the end."""
    out, offset = bytearray(), rng.randrange(0, 100)
    for _ in range(rng.randrange(1, 8)):
        gzip = rng.random() < 0.3
        builder = LegacyRecordBatchBuilder(magic, 1 if gzip else 0, 1 << 20)
        n = rng.randrange(1, 6) if gzip else 1
        for i in range(n):
            builder.append(
                i,
                timestamp=1000 + i if magic else None,
                key=rng.choice([None, b"k"]),
                value=rng.randbytes(rng.randrange(0, 30)),
            )
        raw = bytearray(builder.build())
        raw[0:8] = (offset + n - 1).to_bytes(8, "big")  # a wrapper names its last offset
        offset += n + rng.choice([0, 0, 3])
        out += raw
    whole = bytes(out)
    return whole + whole[: rng.randrange(0, 30)]


class _Assigned:  # what FetchResult reads of aiokafka's assignment: a partition's state
    active = True

    def __init__(self, position: int) -> None:
        self.paused, self.position = False, position

    def state_value(self, tp: TopicPartition) -> Any:
        return self

    def consumed_to(self, position: int) -> None:
        self.position = position


# What getmany and getone take from a fetch, and the position they leave, are aiokafka's
# own, step by step, over random fetches of v2 batches (the cases above) and of old v0
# and v1 message sets, under read_committed and read_uncommitted, with CRC checks on and
# off, a run at a time (``getall``, random ``max_records``) or one by one (``getone``),
# and one byte of the fetch changed in some (then the same error, the same records, and
# the same after the error). Caught: the position moved before a run's records were all
# taken, a partition not ended once its records were (``getall`` kept returning []), an
# aborted batch kept, the batches after a corrupt one taken (aiokafka fetches them again).
@pytest.mark.parametrize("seed", range(40))
def test_fetch_results_are_aiokafkas_own(seed: int) -> None:
    rng = random.Random(seed)
    kind = rng.choice(["v2", "v2", "v2", "v0", "v1"])
    raw, aborted = _fetch_bytes(rng) if kind == "v2" else (_legacy_fetch(rng, int(kind[1])), [])
    if rng.random() < 0.2:
        at = rng.randrange(len(raw))
        raw = raw[:at] + bytes([rng.randrange(256)]) + raw[at + 1 :]
    start = int.from_bytes(raw[:8], "big") + rng.randrange(0, 5)
    isolation, crcs = rng.choice([0, 1]), rng.choice([True, False])
    tp = TopicPartition("t", 2)

    def result(ours: bool) -> tuple[Any, _Assigned]:
        records = (
            _fetch._RecordsOrConsumerRecords(
                tp, _fetch._Kept(raw), list(aborted), start, _fetch.AS_RECORD, None, crcs, isolation
            )
            if ours
            else _fetch._Base(
                tp, MemoryRecords(raw), list(aborted), start, None, None, crcs, isolation
            )
        )
        assigned = _Assigned(start)
        return FetchResult(tp, assignment=assigned, partition_records=records, backoff=0), assigned

    sides = [result(False), result(True)]
    for _ in range(300):
        limit, one = rng.choice([None, 1, 2, 3, 7, 30]), rng.random() < 0.3
        steps: list[Any] = []
        for (fetched, assigned), getall in zip(
            sides, (_fetch._aiokafka_getall, FetchResult.getall), strict=True
        ):
            if not fetched.has_more():
                steps.append(("ended", assigned.position))
                continue
            try:
                if one:
                    got = [m] if (m := fetched.getone()) is not None else []
                else:
                    got = getall(fetched, limit)
                steps.append((list(_fetch.as_records(got)), assigned.position, fetched.has_more()))
            except Exception as exc:
                steps.append((type(exc), assigned.position))
        assert steps[0] == steps[1]
        if steps[0][0] == "ended":
            break  # after an error too: what follows it is compared as well
    else:
        pytest.fail("the fetch never ended")


# A partition's fetched records are freed as soon as aiokafka drops them, with the
# collector off: nothing of the direct path refers back to them, whether they were all
# taken, some, or none. Caught (in a run on genuine Kafka: peak RSS 92 MiB against 66 for
# the copy): an iterator generator kept on them, a reference cycle holding every fetch's
# bytes until the collector ran.
@pytest.mark.parametrize("taken", [None, 3, 0])
def test_fetched_records_are_freed_without_the_collector(taken: int | None) -> None:
    raw, _ = _fetch_bytes(random.Random(2))
    records = _fetch._RecordsOrConsumerRecords(
        TopicPartition("t", 0), _fetch._Kept(raw), [], 0, _fetch.AS_RECORD, None, True, 1
    )
    if taken != 0:
        records.take(taken)
    gone = weakref.ref(records)
    gc.disable()
    try:
        del records
        assert gone() is None
    finally:
        gc.enable()
