"""Batched produce: outputs into aiokafka batches, one builder per partition.

``send_all`` fills one ``BatchBuilder`` per (topic, partition) and hands each to
``send_batch``: one future and one accumulator call per batch instead of per record (the
producer's per-record ``send`` path was most of a light processor's cost). Partition-less
outputs get the producer's own partitioner (``_aiokafka.Partitioner``), so keys land
where ``send`` would put them.

Hand-built batches skip ``send``'s checks, so they are made here, each a ``FatalError``
naming the output (retrying cannot help): an output over the producer's max request
size, a partition its topic lacks, an output topic that has no metadata within
``metadata_timeout_s`` (it does not exist and auto-creation is off), a value or key that
is not bytes. A refusal by the producer or the broker is raised as eosflow's error
(``TransientError`` or ``_aiokafka.Fenced``) for the caller to decide; the send futures
of batches already handed over are in ``sends`` either way. This module knows nothing
of sessions or transactions. ``flush`` waits, bounded, for what was handed over.

Handing a batch over waits while the partition's previous batch is still queued (aiokafka
keeps one queued batch per partition). aiokafka bounds that wait by its request timeout,
40 s, which eosflow does not shorten (it also bounds every request): a broker that stops
answering, or refuses each new login, would hold the transaction that long. So one
call's hand-overs share one bound, ``queue_timeout_s`` (the session passes what is left
of the transaction timeout since the transaction began: a transaction held longer is
aborted by the broker anyway); past it, a ``TransientError`` dooms the transaction.

Records join a queued batch rather than wait behind it: a call's records for a partition
whose queue holds a batch this transaction handed over, not yet taken by the sender nor
closed, are appended to that batch (what aiokafka's own ``send`` does). Without it, each
call's last, partial batch per partition waited for the previous one to be sent -- a
produce round trip per call -- and records fetched meanwhile kept a caught-up
transaction open (issue 55's latency tail). The batches that may take more records are
kept in ``Sends``, one per transaction; a plain list of futures reuses nothing. A
queued batch is appended to only between awaits: before each, its record count is
written back (the sender reads it for the batch's sequence numbers); after each, a batch
the sender took meanwhile is let go, so a record never lands in a batch already sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer

from .._errors import FatalError, TransientError
from .._native import Oversize, bind_batch, fill
from .._records import Output
from .._timeouts import within
from ._clients import Batch, max_request_bytes
from ._errors import map_error, mapped
from ._partitioner import Partitioner

T = TypeVar("T")
bind_batch(Batch)  # _native.fill appends to these
_NO_HEADERS: list[tuple[str, bytes]] = []  # shared, never mutated


class Sends(list[asyncio.Future[object]]):
    """One transaction's send futures (a future per batch handed over), and its batches
    handed over open, by partition: while one is still queued, the next call's records
    for that partition join it (see the module doc)."""

    __slots__ = ("queued",)

    def __init__(self) -> None:
        super().__init__()
        self.queued: dict[tuple[str, int], Batch] = {}


def _queued_open(producer: AIOKafkaProducer, key: tuple[str, int], batch: Batch) -> bool:
    """Whether ``batch`` is the last in its partition's queue, not taken by the sender
    nor closed: records appended to it now are sent with it."""
    pending = producer._message_accumulator._batches.get(key)  # keyed by TopicPartition
    return bool(pending) and pending[-1]._builder is batch.built and not batch.built._closed


def _joinable(producer: AIOKafkaProducer, sends: list[Any], key: tuple[str, int]) -> Batch | None:
    """The batch of this transaction still queued, open, for partition ``key``, if any."""
    if type(sends) is not Sends:
        return None
    batch = sends.queued.get(key)
    if batch is None:
        return None
    if _queued_open(producer, key, batch):
        return batch
    del sends.queued[key]  # taken by the sender, or closed: it takes no more
    return None


async def _settled(
    aw: Awaitable[T],
    producer: AIOKafkaProducer,
    joined: dict[tuple[str, int], Batch],
    open_: dict[tuple[str, int], Batch],
) -> T:
    """``await aw`` with the queued batches this call appends to made safe for the sender
    to take meanwhile: their record counts written back first, and any it took let go
    after (the next record for its partition starts a batch of its own)."""
    for batch in joined.values():
        batch.sync()
    try:
        return await aw
    finally:
        for key, batch in list(joined.items()):
            if not _queued_open(producer, key, batch):
                del joined[key]
                del open_[key]


async def send_all(
    producer: AIOKafkaProducer,
    partitioner: Partitioner,
    outputs: Sequence[Output],
    sends: list[asyncio.Future[object]],
    metadata_timeout_s: float,
    queue_timeout_s: float,
) -> None:
    """Hand ``outputs`` to ``producer`` in order per partition, appending a future per
    batch to ``sends``; the hand-overs wait at most ``queue_timeout_s`` in all. With
    ``sends`` a ``Sends``, records join this transaction's batch still queued for their
    partition."""
    max_bytes = max_request_bytes(producer)
    until = asyncio.get_running_loop().time() + queue_timeout_s
    open_: dict[tuple[str, int], Batch] = {}
    joined: dict[tuple[str, int], Batch] = {}  # of those, batches queued already
    runs = outputs if type(outputs) is list else list(outputs)
    at, n = 0, len(runs)
    lists: dict[str, list[int]] | None = None  # the partitioner's, until the next await
    with mapped("producing outputs", "WRITE"):
        try:
            while True:
                # the runs of outputs that need nothing awaited, in C (``_native``); each
                # output it leaves -- the first to a partition in this call, one its batch
                # refuses, one to be named in an error -- is appended here
                if lists is None:
                    lists = partitioner.lists()
                try:
                    at = fill(runs, at, open_, lists, max_bytes)
                except Oversize as exc:  # appended: the batch is dropped with the app
                    raise _oversize(runs[exc.index].topic, exc.size, max_bytes) from None
                if at >= n:
                    break
                o = runs[at]
                at += 1
                topic, partition = o.topic, o.partition
                if partition is None:
                    if topic not in partitioner.known:
                        await _settled(
                            _ready(partitioner, topic, metadata_timeout_s), producer, joined, open_
                        )
                        lists = None
                    partition = partitioner.partition(topic, o.key, o.value)
                key = (topic, partition)
                batch = open_.get(key)
                if batch is None:  # first output to this partition in this call
                    check = _check_partition(partitioner, topic, partition, metadata_timeout_s)
                    await _settled(check, producer, joined, open_)
                    lists = None  # a metadata answer may have come meanwhile
                    batch = _joinable(producer, sends, key)
                    if batch is None:
                        batch = Batch(producer)
                    else:
                        joined[key] = batch
                    open_[key] = batch
                headers = list(o.headers) if o.headers else _NO_HEADERS  # C builder: a list
                try:
                    meta = batch.append(o.key, o.value, headers, o.timestamp)
                except TypeError as exc:  # the C builder's words for a str or int value
                    raise _not_bytes(o, exc) from None
                if meta is None:
                    # full: send it (a queued one is closed: the sender takes it as it is).
                    # An empty batch takes any record; should that ever change, stop rather
                    # than drop the record.
                    full = batch.builder(full=True)
                    if joined.pop(key, None) is None:
                        handed = _hand_over(producer, full, topic, partition, until)
                        sends.append(await _settled(handed, producer, joined, open_))
                        lists = None
                    batch = open_[key] = Batch(producer)
                    try:
                        meta = batch.append(o.key, o.value, headers, o.timestamp)
                    except TypeError as exc:
                        raise _not_bytes(o, exc) from None
                    if meta is None:
                        raise FatalError(
                            f"aiokafka refused an output for {topic} into an empty batch"
                        )
                if meta.size > max_bytes:  # send() would refuse it; the broker would too
                    raise _oversize(topic, meta.size, max_bytes)
        finally:  # whatever ends the call, a queued batch's count is written back
            for batch in joined.values():
                batch.sync()
        for key, batch in [(k, b) for k, b in open_.items() if k not in joined]:
            sends.append(await _hand_over(producer, batch.builder(full=False), *key, until))
            if type(sends) is Sends:
                sends.queued[key] = batch


def _oversize(topic: str, size: int, max_bytes: int) -> FatalError:
    return FatalError(
        f"an output for {topic} is {size} bytes, over the producer's max request size "
        f"({max_bytes}): it can never be produced"
    )


def _not_bytes(o: Output, exc: TypeError) -> FatalError:
    if o.timestamp is not None and type(o.timestamp) is not int:
        return FatalError(
            f"an output for {o.topic} has timestamp {o.timestamp!r}: Output.timestamp is "
            "milliseconds since the epoch, an int (or None)"
        )
    return FatalError(
        f"an output for {o.topic} has a key or value that is not bytes "
        f"(key {type(o.key).__name__}, value {type(o.value).__name__}): {exc}"
    )


async def _hand_over(
    producer: AIOKafkaProducer, batch: Any, topic: str, partition: int, until: float
) -> asyncio.Future[object]:
    """``producer.send_batch``, waiting for the partition's queue until ``until`` (the
    event loop's clock). A cancelled wait leaves nothing queued: the batch is appended
    only once there is room, with no await after it."""
    try:
        async with asyncio.timeout_at(until):
            return await producer.send_batch(batch, topic, partition=partition)  # type: ignore[no-any-return]
    except TimeoutError:
        raise TimeoutError(
            f"a batch for {topic}[{partition}] was not queued within the transaction's "
            "time: it waited behind an unacknowledged one"
        ) from None


async def _ready(partitioner: Partitioner, topic: str, timeout_s: float) -> None:
    """Metadata of ``topic``, or a ``FatalError`` naming it when the cluster answered
    without it for ``timeout_s`` (aiokafka alone would wait its request timeout, then the
    transaction would abort and retry forever). No answer at all in that time -- brokers
    just back from an outage -- is a ``TransientError``: the transaction aborts and is
    retried (within ``retry_timeout_s``), as for any broker failure."""
    asked_ms = time.time() * 1000
    try:
        await within(partitioner.ready(topic), timeout_s)
    except TimeoutError:
        if not partitioner.answered_since(asked_ms):
            raise TransientError(
                f"metadata of output topic {topic!r}", f"no metadata answer in {timeout_s:g} s"
            ) from None
        raise FatalError(
            f"output topic {topic!r} has no metadata after {timeout_s:g} s: it does not "
            "exist (and the broker does not create topics automatically)"
        ) from None
    except Exception as exc:
        error = map_error(exc, f"metadata of output topic {topic!r}", "WRITE")
        if error.retriable:  # UNKNOWN_TOPIC_OR_PARTITION after aiokafka's own wait
            raise FatalError(f"output topic {topic!r} does not exist ({error})") from exc
        raise error from exc


async def _check_partition(
    partitioner: Partitioner, topic: str, partition: int, timeout_s: float
) -> None:
    """An output naming a partition the topic does not have can never be produced
    (``send_batch`` would fail an assertion deep in aiokafka): stop, saying so."""
    await _ready(partitioner, topic, timeout_s)
    known = partitioner.partitions(topic)
    if partition not in known:
        raise FatalError(
            f"an output names {topic}[{partition}], but {topic} has partitions {sorted(known)}"
        )


async def flush(
    producer: AIOKafkaProducer, sends: Sequence[asyncio.Future[object]], timeout_s: float
) -> None:
    """Wait until every batch in ``sends`` is acknowledged and raise the first send error,
    mapped. (One ``flush`` then a synchronous scan is much cheaper than gathering a
    thousand futures.)

    Bounded by ``timeout_s``: a transactional aiokafka producer resends a batch for as
    long as it takes (it never expires one), so a broker that stays unreachable -- or
    refuses every new login -- would hold the flush forever. Past the bound it is a
    ``TransientError``: the batches were not all acknowledged, so the transaction cannot
    commit, and the caller replaces the producer to drop them."""
    if not sends:
        return
    with mapped("Produce", "WRITE"):
        try:
            await within(_acknowledged(producer, sends), timeout_s)
        except TimeoutError:
            raise TimeoutError(f"outputs not acknowledged within {timeout_s:g} s") from None


async def _acknowledged(
    producer: AIOKafkaProducer, sends: Sequence[asyncio.Future[object]]
) -> None:
    await producer.flush()
    pending = [f for f in sends if not f.done()]
    if pending:
        await asyncio.gather(*pending)
    for f in sends:
        if f.exception() is not None:
            raise f.exception()  # type: ignore[misc]


async def send_to_partition(
    producer: AIOKafkaProducer,
    topic: str,
    partition: int,
    records: Sequence[tuple[bytes, bytes | None]],
    sends: list[asyncio.Future[object]],
    queue_timeout_s: float,
) -> tuple[asyncio.Future[object], int]:
    """Hand ``records`` (key, value) to ``producer`` as batches for one partition, in
    order, appending each batch's future to ``sends``. Returns the last batch's future
    and how many records it holds: once it resolves, the last record's offset is its
    base offset plus that count minus one (a changelog's position record is last). The
    hand-overs wait at most ``queue_timeout_s`` in all."""
    assert records, "nothing to send"
    max_bytes = max_request_bytes(producer)
    until = asyncio.get_running_loop().time() + queue_timeout_s
    with mapped("producing changelog records", "WRITE"):
        batch = Batch(producer)
        for key, value in records:
            meta = batch.append(key, value, _NO_HEADERS)
            if meta is None:  # full: send it, start the next
                full = batch.builder(full=True)
                sends.append(await _hand_over(producer, full, topic, partition, until))
                batch = Batch(producer)
                meta = batch.append(key, value, _NO_HEADERS)
                if meta is None:
                    raise FatalError(f"aiokafka refused a record for {topic} into an empty batch")
            if meta.size > max_bytes:
                raise FatalError(
                    f"a changelog record for {topic} is {meta.size} bytes, over the "
                    f"producer's max request size ({max_bytes}): the store's value is too large"
                )
        count = batch.count
        last = await _hand_over(producer, batch.builder(full=False), topic, partition, until)
        sends.append(last)
    return last, count
