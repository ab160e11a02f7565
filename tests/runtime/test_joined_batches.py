"""Records join a batch still queued for their partition rather than wait behind it
(``_aiokafka._produce``). The test cluster holds Produce requests so a queue stays busy.
The comment above each test names the mutations that made it fail."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiokafka import AIOKafkaProducer
from kit import app_config, eventually, read_all, session_of

import eosflow
from eosflow import _aiokafka as ak
from eosflow.testing import FakeCluster, FaultRule


def _out(value: bytes, partition: int = 0) -> eosflow.Output:
    return eosflow.Output("out", value, partition=partition)


@contextlib.asynccontextmanager
async def _held(
    c: FakeCluster, name: str
) -> AsyncIterator[tuple[AIOKafkaProducer, FaultRule, ak.Partitioner, ak.Sends]]:
    """A transactional producer whose Produce requests the cluster holds until the rule
    is released; its partitioner, and the send futures of one transaction."""
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id=name)
    await p.start()
    rule = c.intercept("Produce", hold=True, times=None)
    try:
        yield p, rule, ak.Partitioner(p), ak.Sends()
    finally:
        rule.release()
        c.remove_fault(rule)
        await ak.close_producer(p, timeout_s=5.0)


def _values(records: list[tuple[int, int, bytes | None]], partition: int) -> list[bytes | None]:
    return [v for p, _, v in records if p == partition]


# One batch in flight and held, one queued behind it: the next two calls return at once,
# their records appended to the queued batch, and the transaction commits all four once
# each, in order. Caught: records not joined (the third call waits behind the queued
# batch, and its 0.5 s bound ends it with a TransientError); the joined batch's record
# count not written back at the call's end (the broker refuses the next batch's
# sequence numbers).
async def test_a_call_behind_a_busy_queue_joins_the_queued_batch(cluster: FakeCluster) -> None:
    c = cluster
    c.create_topic("out", 1)
    async with _held(c, "join") as (p, rule, part, sends):

        async def send(*values: bytes) -> None:
            await ak.send_all(p, part, [_out(v) for v in values], sends, 5.0, 0.5)

        await p.begin_transaction()
        await send(b"a")  # handed over, in flight, held
        await rule.matched()
        await send(b"b")  # handed over, queued behind it
        await send(b"c")  # joins b
        await send(b"d", b"e")  # joins b too
        assert len(sends) == 2 and sends.queued[("out", 0)].count == 4
        rule.release()
        c.remove_fault(rule)
        await ak.flush(p, sends, 10.0)
        await p.commit_transaction()
        await p.begin_transaction()  # the next batch's sequence follows the joined ones
        sends = ak.Sends()
        await send(b"f")
        await ak.flush(p, sends, 10.0)
        await p.commit_transaction()
    values = _values(await read_all(c.bootstrap_servers, "out"), 0)
    assert values == [b"a", b"b", b"c", b"d", b"e", b"f"]


# A call appends to partition 0's queued batch, then waits to hand over a full batch of
# partition 1; meanwhile the sender takes partition 0's batch. The call's next record
# for partition 0 must go to a batch of its own, not into the one already taken.
# Caught: a taken batch not let go after the wait (record d appended to a batch already
# built: lost); its count not written back before the wait (sequence numbers refused).
async def test_a_queued_batch_taken_during_a_call_takes_no_more(cluster: FakeCluster) -> None:
    c = cluster
    c.create_topic("out", 2)
    big = [b"%03d" % i + b"x" * 997 for i in range(40)]  # 16 KiB batches: three of them
    async with _held(c, "taken") as (p, rule, part, sends):

        def queue(partition: int) -> list[Any]:
            return list(p._message_accumulator._batches.get(("out", partition), ()))

        await p.begin_transaction()
        await ak.send_all(p, part, [_out(b"a", 0), _out(b"a", 1)], sends, 5.0, 5.0)
        await rule.matched()  # both in one request, in flight, held
        await ak.send_all(p, part, [_out(b"b", 0), _out(b"b", 1)], sends, 5.0, 5.0)
        assert set(sends.queued) == {("out", 0), ("out", 1)}
        third = [_out(b"c", 0), *(_out(v, 1) for v in big), _out(b"d", 0)]
        call = asyncio.ensure_future(ak.send_all(p, part, third, sends, 5.0, 5.0))

        async def stuck() -> bool:  # partition 1's queued batch full: the call waits
            batches = queue(1)
            return bool(batches) and batches[-1]._builder.closed() and not call.done()

        await eventually(stuck, what="the call waiting behind partition 1's full batch")
        rule.release()  # the sender now takes partition 0's and 1's queued batches
        c.remove_fault(rule)
        await call
        await ak.flush(p, sends, 10.0)
        await p.commit_transaction()
    records = await read_all(c.bootstrap_servers, "out")
    assert _values(records, 0) == [b"a", b"b", b"c", b"d"]
    assert _values(records, 1) == [b"a", b"b", *big]


class Seen(eosflow.Processor):
    def __init__(self) -> None:
        self.seen: list[bytes] = []

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        self.seen.append(record.value or b"")
        return _out(record.value or b"")


# In an app: while its Produce requests are held, three records come one poll each in
# one transaction; the third's output joins the second's queued batch, and the
# transaction commits all three once. Caught: records not joined (the third poll's
# hand-over waits behind the held request until the transaction's produce bound, and the
# transaction aborts).
async def test_a_transaction_commits_what_joined_a_queued_batch(cluster: FakeCluster) -> None:
    c = cluster
    c.create_topic("in", 1)
    c.create_topic("out", 1)
    rule = c.intercept("Produce", hold=True, times=None, transactional_id="tx-1")
    proc = Seen()
    app = eosflow.EosApp(proc, app_config(c, commit_interval_s=5.0, min_transaction_s=2.0))
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, linger_ms=0)
    await p.start()
    try:
        async with app:
            await eventually(
                lambda: asyncio.sleep(0, bool(app.assigned)), timeout_s=20, what="assigned"
            )
            for i, value in enumerate((b"1", b"2", b"3"), 1):
                await p.send_and_wait("in", value, partition=0)
                await eventually(
                    lambda i=i: asyncio.sleep(0, len(proc.seen) == i),  # type: ignore[misc]
                    what=f"record {i} processed",
                )
                if i == 1:
                    await rule.matched()  # its batch in flight, held
            session = session_of(app)
            txn = None if session is None else session._txn
            assert txn is not None
            await eventually(
                lambda: asyncio.sleep(0, ("out", 0) in txn.sends.queued),
                what="the second record's batch queued",
            )
            assert txn.sends.queued[("out", 0)].count == 2  # the third joined it
            rule.release()
            c.remove_fault(rule)
            await eventually(
                lambda: asyncio.sleep(0, c.committed("g").get(("in", 0)) == 3),
                what="the three committed",
            )
    finally:
        rule.release()
        c.remove_fault(rule)
        await p.stop()
    assert [v for _, _, v in await read_all(c.bootstrap_servers, "out")] == [b"1", b"2", b"3"]
    assert proc.seen == [b"1", b"2", b"3"]  # one transaction, never redone
