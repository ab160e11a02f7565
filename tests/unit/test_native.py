"""``eosflow/_native``: the compiled hot paths are the ones in use, and each gives what its
Python reference (``_reference``) gives, over random inputs. The comment above each test
names the mutation that made it fail."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from eosflow import Output, Record, _native
from eosflow._aiokafka._clients import Batch
from eosflow._native import _reference

# What ``_hot`` exports, each with the reference it is held to.
FUNCTIONS = ("murmur2", "fill", "byte_count", "bind_batch", "decode_batch")


# The extension is built by the README's commands and is what eosflow runs: the suite
# fails on an install that left it out. Caught: setup.py's extension removed (COMPILED
# False, the reference in use).
def test_the_compiled_module_is_the_one_in_use() -> None:
    assert _native.COMPILED, "eosflow._native._hot is not built: pip install -e . builds it"
    for name in FUNCTIONS:
        assert getattr(_native, name).__module__ == "eosflow._native._hot", name


# Kafka's murmur2 at every length up to 130 bytes, compiled, in Python and aiokafka's
# alike. Caught (in the compiled one): a tail byte dropped, a word's top byte shifted
# wrong, the finalisation's shifts swapped.
def test_murmur2_compiled_is_the_reference_and_aiokafkas() -> None:
    rng = random.Random(3)
    for n in range(131):
        for _ in range(20):
            data = rng.randbytes(n)
            want = aiokafka_murmur2(data)
            assert _native.murmur2(data) == want, (n, data)
            assert _reference.murmur2(data) == want, (n, data)


# Key + value bytes of records with keys and values missing, empty, of every size, and
# of other types than ``Record``. Caught: a value or a key not counted, a non-Record
# skipped.
def test_byte_count_is_the_references() -> None:
    class Lookalike:  # not a Record: counted through its attributes
        def __init__(self, key: bytes | None, value: bytes | None) -> None:
            self.key, self.value = key, value

    rng = random.Random(4)

    def part() -> bytes | None:
        return rng.choice([None, b"", rng.randbytes(rng.randrange(1, 300))])

    for _ in range(200):
        records: list[Any] = []
        for offset in range(rng.randrange(0, 40)):
            if rng.random() < 0.1:
                records.append(Lookalike(part(), part()))
            else:
                records.append(Record("t", 0, offset, part(), part(), (), 0))
        want = _reference.byte_count(records)
        assert _native.byte_count(records) == want
        assert _native.byte_count(tuple(records)) == want  # any iterable
    assert _native.byte_count([]) == 0


TOPICS = {"a": [0, 1, 2], "b": [2, 0, 1, 3, 4]}  # as the partitioner lists them


def _outputs(rng: random.Random, n: int) -> list[Any]:
    """``n`` outputs, most of them valid, to topics known (``TOPICS``) and not, with and
    without partitions; some the caller must handle: not bytes, bad timestamps, keyless
    without a partition, oversize, not an ``Output`` at all."""
    keys = [b"k%d" % i for i in range(40)] + [b"", b"x" * 50]
    out: list[Any] = []
    for _ in range(n):
        topic = rng.choice(["a", "a", "b", "c"])  # c: no partition list
        roll = rng.random()
        key: Any = rng.choice(keys)
        value: Any = rng.randbytes(rng.randrange(0, 120))
        partition = None if rng.random() < 0.6 else rng.randrange(0, 6)
        timestamp: Any = 1_700_000_000_000 + rng.randrange(10**6)
        headers: Any = () if rng.random() < 0.8 else (("h", b"1"), ("i", b""))
        if roll < 0.03:
            value = "not bytes"
        elif roll < 0.05:
            key = None
        elif roll < 0.06:
            timestamp = "noon"
        elif roll < 0.07:
            value = b"v" * 3_000  # over the test's max_bytes
        elif roll < 0.08:
            value = None  # a tombstone: appended
        if roll > 0.99:
            out.append(("not", "an", "Output"))
        else:
            out.append(Output(topic, value, key, headers, partition, timestamp))
    return out


def _run(fill: Callable[..., int], outputs: list[Any], producer: AIOKafkaProducer) -> Any:
    """Feed ``outputs`` through ``fill`` as ``send_all`` does, with a caller that opens a
    partition's batch and retries, replaces a full batch and retries, and otherwise
    notes the output left and goes on. Returns what was left, in order, and each
    partition's records as its batches decode."""
    open_: dict[tuple[str, int], Batch] = {}
    done: dict[tuple[str, int], list[bytes | bytearray]] = {}
    left: list[tuple[int, str]] = []
    at = 0
    while True:
        try:
            at = fill(outputs, at, open_, TOPICS, 2_000)
        except _native.Oversize as exc:  # appended: send_all stops the app; here, go on
            left.append((exc.index, f"oversize {exc.size}"))
            at = exc.index + 1
            continue
        if at >= len(outputs):
            break
        o = outputs[at]
        why = _left_why(o, open_, done, producer)
        if why is None:
            continue  # a batch opened or replaced: the same output again
        left.append((at, why))
        at += 1
    decoded: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    for key, batch in open_.items():
        done.setdefault(key, []).append(batch.builder(full=False)._builder.build())
    for key, built in done.items():
        decoded[key] = [
            (r.offset, r.key, r.value, tuple(r.headers), r.timestamp)
            for data in built
            for r in DefaultRecordBatch(bytes(data))
        ]
    return left, decoded


def _left_why(o: Any, open_: dict[tuple[str, int], Batch], done: Any, producer: Any) -> str | None:
    if type(o) is not Output:
        return "not an Output"
    partition = o.partition
    if partition is None:
        listed = TOPICS.get(o.topic)
        if type(o.key) is not bytes or listed is None:
            return "no partition"
        partition = listed[(aiokafka_murmur2(o.key) & 0x7FFFFFFF) % len(listed)]
    key = (o.topic, partition)
    batch = open_.get(key)
    if batch is None:
        open_[key] = Batch(producer)
        return None
    try:
        meta = batch.append(o.key, o.value, list(o.headers), o.timestamp)
    except TypeError:
        return "TypeError"
    if meta is None:
        done.setdefault(key, []).append(batch.builder(full=True)._builder.build())
        open_[key] = Batch(producer)
        return None
    return f"oversize {meta.size}"


# Over random runs of outputs, the compiled ``fill`` leaves the same outputs for the same
# reasons and fills the same batches, record for record, as its reference: partitions
# by hash (two topics' lists), explicit ones, batches filling up (1 KiB each), outputs
# that are not bytes, bad timestamps, keyless, oversize, not Outputs. Caught: the hash's
# low 31 bits not taken, the batch of the previous output reused for another partition,
# a full batch's output skipped instead of left, a TypeError left unreported.
@pytest.mark.parametrize("seed", range(12))
async def test_fill_is_the_references(seed: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", max_batch_size=1_024)
    outputs = _outputs(random.Random(seed), 600)
    _reference.bind_batch(Batch)
    try:
        want = _run(_reference.fill, outputs, producer)
        got = _run(_native.fill, outputs, producer)
    finally:
        await producer.stop()  # never started: nothing to stop but its marks
    assert got[0] == want[0]
    assert got[1] == want[1]
    assert sum(len(records) for records in got[1].values()) > 400  # most were appended
    assert {why.split()[0] for _, why in got[0]} >= {"TypeError", "oversize", "no"}


# Python that runs inside ``fill`` (an output's headers iterated) may shorten the list
# it walks: the compiled ``fill`` reads its length every time, as the reference does,
# and stops where the list now ends. Caught: the length read once (the compiled one read
# past the list's end: a segfault, found in review).
async def test_fill_stops_where_a_shortened_list_ends() -> None:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9")

    class Shortening:  # headers that empty the outputs when iterated
        def __bool__(self) -> bool:
            return True

        def __iter__(self) -> Any:
            outputs.clear()
            return iter([("h", b"1")])

    try:
        for fill in (_reference.fill, _native.fill):
            _reference.bind_batch(Batch)
            outputs: list[Any] = [Output("t", b"v", b"k", Shortening(), 0, 1)]
            outputs += [Output("t", b"v", b"k", (), 0, 1) for _ in range(3)]
            assert fill(outputs, 0, {("t", 0): Batch(producer)}, {}, 1 << 20) == 1
            with pytest.raises(ValueError):
                fill(outputs, -1, {}, {}, 1 << 20)
    finally:
        await producer.stop()


# murmur2 takes what the reference takes: bytes, their subclasses, bytearray,
# memoryview. Caught: the compiled one accepting only exact bytes (a TypeError for a
# bytearray key through ``default_partition``).
def test_murmur2_takes_bytes_like_keys() -> None:
    class Key(bytes):
        pass

    data = b"a-little-bit-long-string"
    want = aiokafka_murmur2(data)
    for key in (data, Key(data), bytearray(data), memoryview(data)):
        assert _native.murmur2(key) == want == _reference.murmur2(key), type(key)


def _builder() -> DefaultRecordBatchBuilder:
    """aiokafka's builder of an uncompressed, non-transactional v2 batch."""
    return DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )


def _batch(rng: random.Random, base: int, log_append: bool = False) -> bytes:
    """A v2 record batch as a producer builds it, its records of every shape (keys and
    values missing, empty or long, headers with missing values), at base offset
    ``base``; ``log_append``: flagged as the broker's LogAppendTime."""
    builder = _builder()
    first = rng.randrange(1, 1 << 41)
    for i in range(rng.randrange(0, 60)):

        def part() -> bytes | None:
            return rng.choice([None, b"", rng.randbytes(rng.choice([1, 7, 100, 300]))])

        headers = [
            (rng.choice(["h", "trace-id", "é"]), part()) for _ in range(rng.choice([0, 0, 1, 3]))
        ]
        builder.append(
            i, timestamp=first + rng.randrange(-5, 10**6), key=part(), value=part(), headers=headers
        )
    raw = bytearray(builder.build())
    raw[0:8] = base.to_bytes(8, "big")
    if log_append:
        raw[21:23] = (int.from_bytes(raw[21:23], "big") | 0x08).to_bytes(2, "big")
    return bytes(raw)


def _aiokafkas(raw: bytes, topic: str, partition: int, fetch_offset: int) -> list[Record]:
    return [
        Record(topic, partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp)
        for r in DefaultRecordBatch(raw)
        if r.offset >= fetch_offset
    ]


# An uncompressed v2 batch decodes into the Records aiokafka's own decoder gives, field
# for field, compiled and in Python, from any position in a fetch and from any fetch
# offset into it, LogAppendTime batches included. Caught: a varint's sign (zigzag)
# dropped, the max timestamp not taken for LogAppendTime, records below the fetch
# offset kept, headers dropped.
@pytest.mark.parametrize("seed", range(8))
def test_decode_batch_is_aiokafkas(seed: int) -> None:
    rng = random.Random(seed)
    batches = [
        _batch(rng, base=rng.randrange(0, 1 << 40), log_append=rng.random() < 0.3) for _ in range(6)
    ]
    fetch = b"".join(batches)
    pos = 0
    for raw in batches:
        base = int.from_bytes(raw[:8], "big")
        for fetch_offset in (0, base, base + rng.randrange(0, 60), base + 1000):
            want = _aiokafkas(raw, "t", 4, fetch_offset)
            assert _native.decode_batch(fetch, pos, "t", 4, fetch_offset) == want
            assert _reference.decode_batch(fetch, pos, "t", 4, fetch_offset) == want
        pos += len(raw)


# A batch cut short, or with any byte changed, never crashes the compiled decoder: it
# raises what the Python one raises, in the same words (Corrupt, or the header's
# UnicodeDecodeError), or both give the same records (a changed value byte). Caught: a
# record's length not bounded by its batch (another check then refused it, in other
# words). A read past the bytes themselves shows only under AddressSanitizer: a
# reviewer's build of its first version ran 200,000 changed batches clean.
def test_decode_batch_refuses_what_it_cannot_read() -> None:
    rng = random.Random(11)
    for _ in range(300):
        raw = _batch(rng, base=rng.randrange(0, 1000))
        if rng.random() < 0.3:
            raw = raw[: rng.randrange(0, len(raw))]
        else:
            at = rng.randrange(0, len(raw))
            raw = raw[:at] + bytes([rng.randrange(256)]) + raw[at + 1 :]
        outcomes = []
        for decode in (_native.decode_batch, _reference.decode_batch):
            try:
                outcomes.append(decode(raw, 0, "t", 0, 0))
            except (_native.Corrupt, UnicodeDecodeError) as exc:
                outcomes.append((type(exc), str(exc)))  # the same words: the same check
        assert outcomes[0] == outcomes[1]


def _rebuilt(offsets: list[int], count: int | None = None) -> bytes:
    """An uncompressed batch of records at ``offsets`` (deltas as given), its records
    count field set to ``count``, its CRC valid."""
    builder = _builder()
    for offset in offsets:
        builder.append(offset, timestamp=1, key=None, value=b"v%d" % offset, headers=[])
    raw = bytearray(builder.build())
    raw[23:27] = max(offsets).to_bytes(4, "big")
    if count is not None:
        raw[57:61] = count.to_bytes(4, "big")
    raw[17:21] = calc_crc32c(bytes(raw[21:])).to_bytes(4, "big")
    return bytes(raw)


# Found in review: a batch whose offsets go back keeps only records past the last one
# kept, as aiokafka's loop does (else the position would move back: duplicates); a batch
# whose count leaves bytes unread, or whose record has a negative header count, is
# refused, as aiokafka refuses it (else records would be skipped without an error).
def test_decode_batch_keeps_aiokafkas_rules_for_malformed_batches() -> None:
    back = _rebuilt([0, 1, 2, 0, 4])
    for decode in (_native.decode_batch, _reference.decode_batch):
        assert [r.offset for r in decode(back, 0, "t", 0, 0)] == [0, 1, 2, 4]
        with pytest.raises(_native.Corrupt, match="left"):
            decode(_rebuilt([0, 1, 2, 3, 4], count=3), 0, "t", 0, 0)
    with pytest.raises(Exception, match="unconsumed"):  # aiokafka's own words
        list(DefaultRecordBatch(_rebuilt([0, 1, 2, 3, 4], count=3)))
