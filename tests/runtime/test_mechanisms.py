"""Each runtime mechanism, driven by the test cluster's fault injection.

Every test here fails when the mechanism it names is removed from the session: the
comment above each says how.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from kit import Gate, app_config, eventually, read_all, session_of

import eosflow
from eosflow import _aiokafka as ak
from eosflow._ops._metrics import PrometheusMetrics
from eosflow._protocol import _codes as codes
from eosflow.testing import ClusterSettings, FakeCluster
from eosflow.testing._ladder import fake_settings

N = 200


MECHANISMS: dict[str, object] = dict(
    session_timeout_s=6.0,
    heartbeat_interval_s=0.2,
    transaction_timeout_s=5.0,
    group_protocol="classic",
    transactions_v2="off",
)


def cfg(c: FakeCluster, **kw: object) -> eosflow.EosConfig:
    """The mechanism tests' config: the classic group protocol and transactions v1, whose
    requests their fault rules name (Heartbeat, AddPartitionsToTxn...); the consumer
    protocol's and transactions v2's own tests ask for theirs."""
    return app_config(c, **(MECHANISMS | kw))


async def seed(c: FakeCluster, n: int = N, partitions: int = 1) -> None:
    c.create_topic("in", partitions)
    c.create_topic("out", 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await p.start()
    await asyncio.gather(
        *[await p.send("in", f"v{i}".encode(), partition=i % partitions) for i in range(n)]
    )
    await p.stop()


async def until(app: eosflow.EosApp, check: object, what: str, timeout_s: float = 30) -> None:
    async def ok() -> bool:
        assert app.failure is None, app.failure
        return bool(check())  # type: ignore[operator]

    await eventually(ok, timeout_s=timeout_s, what=what)


async def assert_exactly_once(c: FakeCluster, n: int = N) -> None:
    values = [v for _, _, v in await read_all(c.bootstrap_servers, "out")]
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(n))  # type: ignore[type-var]


def all_done(app: eosflow.EosApp, c: FakeCluster, n: int = N) -> bool:
    total = sum(c.committed("g", "in").values())
    return total == n and app.last_outcome is eosflow.Outcome.COMMITTED


# Mechanism 2: the forced heartbeat decides. Remove `_confirm_membership` and the first
# transaction commits although the coordinator said the member is unknown.
async def test_failed_forced_heartbeat_aborts_then_work_is_redone(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    rule = c.intercept("Heartbeat", version=4, error=codes.UNKNOWN_MEMBER_ID)  # once
    app = eosflow.EosApp(Gate("out"), cfg(c))
    async with app:
        await until(app, lambda: all_done(app, c), "all committed")
    assert rule.hits == 1
    assert app.stats.aborted >= 1 and "forced heartbeat" in (
        session_of(app).last_abort_reason or ""
    )  # type: ignore[union-attr]
    await assert_exactly_once(c)


# Mechanism 2: EndTxn waits for the heartbeat's answer. While the forced heartbeat is
# held, no EndTxn may reach the broker; it comes once the heartbeat is answered. Fire the
# heartbeat without awaiting it and EndTxn arrives while the heartbeat is still held.
# (Checked: that mutant fails here; the earlier version of this test, which looked at
# the transaction's state right after the heartbeat matched, passed with it.)
async def test_end_txn_waits_for_the_forced_heartbeat_answer(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    rule = c.intercept("Heartbeat", version=4, hold=True)
    end_txn = c.intercept("EndTxn", hold=True)  # observes the first EndTxn, then lets it go
    app = eosflow.EosApp(Gate("out"), cfg(c))
    async with app:
        await rule.matched()
        # an event that must not happen: bounded by several heartbeat and retry periods
        with pytest.raises(TimeoutError):
            await end_txn.matched(timeout_s=1.0)
        assert c.txns.txns["tx-1"].state == "Ongoing"
        rule.release()
        await end_txn.matched(timeout_s=10.0)
        end_txn.release()
        await until(app, lambda: all_done(app, c), "all committed")
    await assert_exactly_once(c)


# Mechanism 3: a revocation while a transaction is open dooms it. Drop the `doom` call in
# `_revoked` and the parked transaction commits after its partitions moved.
async def test_revocation_dooms_the_open_transaction(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    proc = Gate("out", park_at=150)
    app = eosflow.EosApp(proc, cfg(c, max_records_per_txn=1000, commit_interval_s=4.0))
    async with app:
        await asyncio.wait_for(proc.parked.wait(), 20)
        c.force_rebalance("g")
        await until(app, lambda: proc.revoked_at, "revocation delivered")
        proc.gate.set()
        await until(app, lambda: all_done(app, c), "all committed")
    assert app.stats.aborted >= 1
    assert session_of(app).last_abort_reason == "partitions revoked"  # type: ignore[union-attr]
    await assert_exactly_once(c)


# Mechanism 3: a revocation waits for EndTxn in flight. Release the session lock before
# EndTxn and `on_revoked` runs while EndTxn is held.
async def test_revocation_waits_for_end_txn_in_flight(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    proc = Gate("out")
    rule = c.intercept("EndTxn", hold=True)
    app = eosflow.EosApp(proc, cfg(c))
    async with app:
        await rule.matched()
        c.force_rebalance("g")
        # the member's heartbeat learns of the rebalance within a heartbeat interval;
        # give it several before looking
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert not proc.revoked_at, "revoked while EndTxn was in flight"
            await asyncio.sleep(0.05)
        released = time.monotonic()
        rule.release()
        await until(app, lambda: proc.revoked_at, "revocation after EndTxn")
        assert proc.revoked_at[0] >= released
        await until(app, lambda: all_done(app, c), "all committed")
    await assert_exactly_once(c)


# Mechanism 4: pre-KIP-447 brokers get the post-commit delay before a rebalance may go on.
# Without it the revocation follows the commit at once.
@pytest.mark.parametrize(("profile", "delayed"), [("2.4", True), ("4.0", False)])
async def test_post_commit_delay_holds_rebalance_only_without_kip447(
    profile: str, delayed: bool
) -> None:
    async with FakeCluster(
        ClusterSettings(profile=profile, groups=fake_settings().groups, txns=fake_settings().txns)
    ) as c:
        await seed(c)
        proc = Gate("out")
        rule = c.intercept("EndTxn", hold=True)
        app = eosflow.EosApp(proc, cfg(c, post_commit_delay_s=1.5))
        async with app:
            await rule.matched()
            c.force_rebalance("g")
            committed_at = time.monotonic()
            rule.release()
            await until(app, lambda: proc.revoked_at, "revocation")
            waited = proc.revoked_at[0] - committed_at
            await until(app, lambda: all_done(app, c), "all committed")
        await assert_exactly_once(c)
    if delayed:
        assert waited >= 1.4, f"revocation after {waited:.2f} s, delay is 1.5 s"
    else:
        assert waited < 1.0, f"revocation after {waited:.2f} s on a KIP-447 broker"


# Mechanisms 5 and 6: ILLEGAL_GENERATION on TxnOffsetCommit aborts (not a crash) and the
# aborted work is consumed again. Without the rewind the aborted records are lost.
async def test_fenced_offset_commit_aborts_and_rewinds(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    c.intercept("TxnOffsetCommit", error=codes.ILLEGAL_GENERATION)
    app = eosflow.EosApp(Gate("out"), cfg(c))
    async with app:
        await until(app, lambda: all_done(app, c), "all committed")
    assert app.stats.aborted == 1
    assert "ILLEGAL_GENERATION" in (session_of(app).last_abort_reason or "")  # type: ignore[union-attr]
    await assert_exactly_once(c)


# Mechanism 5: committed offsets of a new assignment come from a stable fetch. With a
# plain fetch the app starts from offset 0 while another producer's transaction still
# holds offset 120 pending, and processes records 0..119 a second time.
async def test_assignment_waits_for_pending_transactional_offsets(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    other = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id="other")
    await other.start()
    caps = await ak.capabilities(other)
    await other.begin_transaction()
    tp = TopicPartition("in", 0)
    assert (
        await ak.commit_offsets_in_txn(
            other, "other", "g", {tp: 120}, caps, ak.GroupIdentity(-1, "", None, None)
        )
        == 0
    )
    proc = Gate("out")
    seen: list[int] = []
    orig = proc.process

    async def spy(record: eosflow.Record) -> eosflow.Output:
        seen.append(record.offset)
        return await orig(record)

    proc.process = spy  # type: ignore[method-assign]
    app = eosflow.EosApp(proc, cfg(c))
    async with app:
        await until(
            app,
            lambda: c.groups.get("g") and c.groups.get("g").members,  # type: ignore[union-attr]
            "app joined",
        )
        await other.commit_transaction()
        await until(app, lambda: seen and max(seen) == N - 1, "processed to the end")
    await other.stop()
    assert min(seen) == 120, "the app must resume from the offset the pending txn committed"


# Mechanism 7: an EndTxn whose answer never comes is not retried as a commit: the producer
# id is re-initialised (KIP-360), the producer replaced and positions re-read.
async def test_unknown_end_txn_outcome_is_recovered(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    rule = c.intercept("EndTxn", hold=True)
    inits = c.intercept("InitProducerId", version=4, times=None)
    app = eosflow.EosApp(Gate("out"), cfg(c, transaction_timeout_s=1.0))
    async with app:
        await rule.matched()
        await until(app, lambda: app.stats.recovered == 1, "recovered", timeout_s=10)
        rule.release()
        await until(app, lambda: all_done(app, c), "all committed")
    assert inits.hits >= 1, "KIP-360 InitProducerId with the current id and epoch"
    await assert_exactly_once(c)


# Mechanism 8: a processor error aborts, commits nothing past it, and stops the app.
async def test_processor_error_stops_with_nothing_committed_past_it(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)

    class Boom(Gate):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if record.offset == 150:
                raise ValueError("bad record")
            return await super().process(record)

    app = eosflow.EosApp(Boom("out"), cfg(c))
    with pytest.raises(eosflow.ProcessingError, match=r"in\[0\]@150"):
        async with app:
            await until(app, lambda: False, "never", timeout_s=20)
    committed = c.committed("g").get(("in", 0), 0)
    assert committed <= 150
    out = [v for _, _, v in await read_all(c.bootstrap_servers, "out")]
    assert len(out) == committed and len(set(out)) == len(out)


# Mechanism 8: with a dead-letter topic the failing record goes there, in the transaction.
async def test_dead_letter_policy_continues(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    c.create_topic("dlq", 1)

    class Picky(Gate):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if record.offset % 50 == 7:
                raise ValueError(f"reject {record.offset}")
            return await super().process(record)

    app = eosflow.EosApp(Picky("out"), cfg(c, dead_letter_topic="dlq"))
    async with app:
        await until(app, lambda: all_done(app, c), "all committed")
    out = [v for _, _, v in await read_all(c.bootstrap_servers, "out")]
    dlq = await read_all(c.bootstrap_servers, "dlq")
    rejected = {f"v{i}".encode() for i in range(N) if i % 50 == 7}
    assert {v for _, _, v in dlq} == rejected and len(dlq) == len(rejected)
    assert app.stats.dead_lettered == len(rejected) and app.stats.aborted == 0
    assert sorted(out + [v for _, _, v in dlq]) == sorted(  # type: ignore[type-var]
        f"v{i}".encode() for i in range(N)
    )


# Mechanism 9: cancelling run() during a commit finishes that commit and reports it --
# whether the loop was working ahead or awaiting the commit (serial: the cancellation
# lands on that await; forget the commit there and the cancelled app aborts a new end
# behind it instead, reporting unknown-then-recovered).
@pytest.mark.parametrize("ahead", [True, False], ids=["ahead", "serial"])
async def test_cancel_mid_commit_has_an_explicit_outcome(cluster: FakeCluster, ahead: bool) -> None:
    c = cluster
    await seed(c)
    rule = c.intercept("EndTxn", hold=True)
    app = eosflow.EosApp(Gate("out"), cfg(c, process_ahead=ahead))
    task = asyncio.create_task(app.run())
    await rule.matched()
    task.cancel()
    await asyncio.sleep(0)
    rule.release()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert app.last_outcome is eosflow.Outcome.COMMITTED
    g = c.groups.get("g")
    assert g is not None and g.members == {}, "the app left the group"


# Mechanism 7: aiokafka goes fatal on a fencing answer and refuses further sends. The
# session must not leak its IllegalOperation: the doomed transaction is resolved by
# KIP-360 (here the epoch is really ours, so it recovers and carries on).
async def test_producer_gone_fatal_mid_transaction_is_recovered(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    rule = c.intercept("AddPartitionsToTxn", error=codes.INVALID_PRODUCER_EPOCH)  # once
    app = eosflow.EosApp(Gate("out"), cfg(c))
    async with app:
        await until(app, lambda: all_done(app, c), "all committed")
    assert rule.hits == 1 and app.stats.recovered >= 1
    await assert_exactly_once(c)


# Mechanism 7, the race the CLI test once hit: sends continue after aiokafka went fatal
# (the fencing answer arrives mid-transaction), so `send_batch` raises IllegalOperation, which is
# not a KafkaError. It must doom the transaction, not escape from run().
async def test_sends_refused_after_the_producer_went_fatal(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)

    class Slowish(Gate):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            await asyncio.sleep(0.005)  # 200 records: ~1 s of sends in one transaction
            return await super().process(record)

    rule = c.intercept("AddPartitionsToTxn", error=codes.INVALID_PRODUCER_EPOCH, delay_s=0.3)
    app = eosflow.EosApp(Slowish("out"), cfg(c, commit_interval_s=1.5))
    async with app:
        await until(app, lambda: all_done(app, c), "all committed")
    assert rule.hits == 1 and app.stats.recovered >= 1
    await assert_exactly_once(c)


# Mechanism 5's failure mode: if the committed offsets of a new assignment cannot be
# fetched (a non-retriable error), the app must stop with a clear error -- aiokafka
# swallows exceptions from the rebalance listener, so without the session recording the
# failure the partition would silently never be processed.
async def test_failed_offset_fetch_on_assignment_is_fatal(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, n=10)
    c.intercept("OffsetFetch", version=9, error=codes.GROUP_AUTHORIZATION_FAILED, times=None)
    app = eosflow.EosApp(Gate("out"), cfg(c))
    with pytest.raises(eosflow.FatalError, match=r"positioning newly assigned.*OffsetFetch"):
        async with app:
            await until(app, lambda: False, "never", timeout_s=20)
    assert c.committed("g") == {}


class Spy(Gate):
    """Pass-through that records every offset it processes, per partition."""

    def __init__(self, out: str) -> None:
        super().__init__(out)
        self.seen: list[tuple[int, int]] = []

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        self.seen.append((record.partition, record.offset))
        return await super().process(record)


# Invariant 16 (docs/design.md): the next records are processed while a commit is in
# flight, and adopted by the next transaction when it committed. With EndTxn held, the
# app must process records past the first transaction (never more than one transaction's
# worth) -- and none with process_ahead off; every record is processed exactly once
# (adopted, not redone).
@pytest.mark.parametrize("ahead", [True, False])
async def test_records_are_processed_while_the_commit_is_in_flight(
    cluster: FakeCluster, ahead: bool
) -> None:
    c = cluster
    await seed(c)
    proc = Spy("out")
    rule = c.intercept("EndTxn", hold=True)
    app = eosflow.EosApp(proc, cfg(c, max_records_per_txn=50, process_ahead=ahead))
    async with app:
        await rule.matched()
        if ahead:
            await until(app, lambda: len(proc.seen) >= 100, "50 records processed ahead")
        # a window in which nothing more may happen: the next transaction cannot begin
        await asyncio.sleep(0.5)
        assert c.txns.txns["tx-1"].state == "Ongoing", "EndTxn is still held"
        assert sorted(o for _, o in proc.seen) == list(range(100 if ahead else 50))
        rule.release()
        await until(app, lambda: all_done(app, c), "all committed")
    assert sorted(o for _, o in proc.seen) == list(range(N)), "each record processed once"
    assert app.stats.dropped_ahead == 0 and app.stats.records == N
    await assert_exactly_once(c)


# Invariant 16: work done ahead of an aborted commit is dropped and redone from the
# committed offsets. The offset commit is answered ILLEGAL_GENERATION after a delay in
# which records 50..99 are processed ahead; they must be processed again, output once.
async def test_work_ahead_of_an_aborted_commit_is_redone(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    proc = Spy("out")
    rule = c.intercept("TxnOffsetCommit", error=codes.ILLEGAL_GENERATION, delay_s=0.5)
    metrics = PrometheusMetrics()
    app = eosflow.EosApp(
        proc, cfg(c, max_records_per_txn=50, process_ahead=True), observers=[metrics]
    )
    async with app:
        await until(app, lambda: all_done(app, c), "all committed")
    assert rule.hits == 1 and app.stats.aborted == 1
    assert app.stats.dropped_ahead == 50
    # through the observers, so Prometheus sees it too
    dropped = metrics.registry.get_sample_value("eosflow_records_dropped_ahead_total")
    assert dropped == 50
    offsets = [o for _, o in proc.seen]
    assert offsets[:100] == list(range(100)), "0..49 in the aborted txn, 50..99 ahead of it"
    assert sorted(offsets[100:]) == list(range(N)), "everything redone from offset 0"
    await assert_exactly_once(c)


# Invariant 16 under a rebalance: a second member joins while the first member's commit is
# held and it has processed records of both partitions ahead. After the commit the
# revocation goes through; the work ahead must not be committed for a partition that moved.
async def test_work_ahead_across_a_rebalance_is_exactly_once(cluster: FakeCluster) -> None:
    c = cluster
    n = 2000
    await seed(c, n=n, partitions=2)

    class Paced(Spy):  # ~2 s of work for one member: the rebalance completes well before
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            await asyncio.sleep(0.001)
            return await super().process(record)

    first, second = Paced("out"), Paced("out")
    rule = c.intercept("EndTxn", hold=True, transactional_id="tx-1")
    # each transaction ends at its 50 records, never early: a first one cut short by the
    # interval (or caught up between fetches) left 95 processed, never 100 (CI, twice)
    full = dict(max_records_per_txn=50, process_ahead=True, commit_interval_s=3.0)
    full["min_transaction_s"] = 3.0
    app1 = eosflow.EosApp(first, cfg(c, **full))
    async with app1:
        await rule.matched()
        await until(app1, lambda: len(first.seen) == 100, "50 records processed ahead")
        app2 = eosflow.EosApp(second, cfg(c, transactional_id="tx-2", **full))
        async with app2:
            group = c.groups.get("g")
            assert group is not None
            await until(app1, lambda: len(group.members) == 2, "second member joining")
            rule.release()
            await until(app1, lambda: sum(c.committed("g", "in").values()) == n, "all committed")
            assert app2.failure is None
            assert second.seen, "the second member got a partition"
    assert app1.stats.dropped_ahead + app1.stats.aborted >= 1
    await assert_exactly_once(c, n)


# The error tree's promise for `process()` too: a `TransactionError` it raises is
# retried -- the transaction aborts, or the work done ahead is dropped and put back, and
# the records are redone -- never dead-lettered (with a dead-letter topic) nor fatal
# (without one). Record 70 raises once, inside work done ahead while the first commit is
# held (ahead) or inside a transaction (not). Catch it with the other exceptions (the
# old `_process`) and it is dead-lettered; re-raise it without the work-ahead handling
# and the app stops on it.
@pytest.mark.parametrize("ahead", [True, False])
async def test_a_transaction_error_from_process_is_retried(
    cluster: FakeCluster, ahead: bool
) -> None:
    c = cluster
    await seed(c)
    c.create_topic("dlq", 1)

    class RetryOnce(Spy):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if record.offset == 70 and not self.gate.is_set():
                self.gate.set()
                raise eosflow.TransactionError("not now")
            return await super().process(record)

    proc = RetryOnce("out")
    hold = c.intercept("EndTxn", hold=True)
    app = eosflow.EosApp(
        proc,
        cfg(c, max_records_per_txn=50, process_ahead=ahead, dead_letter_topic="dlq"),
    )
    async with app:
        await hold.matched()
        if ahead:
            await until(app, lambda: proc.gate.is_set(), "record 70 raised ahead")
        hold.release()
        await until(app, lambda: all_done(app, c), "all committed")
    assert proc.gate.is_set()
    assert app.stats.dead_lettered == 0
    assert await read_all(c.bootstrap_servers, "dlq") == []
    if ahead:
        assert app.stats.dropped_ahead >= 20 and app.stats.aborted == 0
    else:
        assert app.stats.aborted == 1
    await assert_exactly_once(c)


# Invariant 16 when a poll fails during work ahead: records already polled and processed
# ahead (50..59) are put back, not dropped with the work. The poll after them raises a
# TransientError while the first commit is held; that commit then succeeds. Without the
# handling in `_work_ahead` the consumer stays past 59 and records 50..59 are lost.
async def test_a_poll_failing_during_work_ahead_loses_nothing(cluster: FakeCluster) -> None:
    from eosflow._errors import TransientError

    c = cluster
    await seed(c)
    proc = Spy("out")
    hold = c.intercept("EndTxn", hold=True)
    app = eosflow.EosApp(proc, cfg(c, max_records_per_txn=50, process_ahead=True))
    async with app:
        await until(app, lambda: session_of(app) is not None, "the session")
        session = session_of(app)
        assert session is not None
        original = session.poll  # wrapped before the first commit (held) is in flight
        ahead: list[eosflow.Record] = []  # returned while the commit is in flight
        raised = False

        async def poll(max_records: int, timeout_s: float) -> list[eosflow.Record]:
            nonlocal raised
            if app._runtime._ending is None or raised:
                return await original(max_records, timeout_s)
            if len(ahead) >= 10:  # ten processed ahead: this poll fails
                raised = True
                hold.release()  # the commit goes through; the work ahead is not adopted
                raise TransientError("consuming", "injected failure")
            got = await original(min(max_records, 10 - len(ahead)), timeout_s)
            ahead.extend(got)
            return got

        session.poll = poll  # type: ignore[method-assign]
        await until(app, lambda: all_done(app, c), "all committed")
    assert raised and [r.offset for r in ahead] == list(range(50, 60))
    assert app.stats.dropped_ahead == 10 and app.stats.recovered == 0
    await assert_exactly_once(c)


# Invariant 16 across an abort's rewind (0bb49f1's red CI run: a metrics test stalled at
# 100 of 200 records on genuine 4.4.0, about one run in 20 with work ahead on). A new
# group's first transaction takes all of partition 0, then partition 1's first record
# raises a retriable error: it aborts, and its rewind sends both partitions back to
# their start. While it does, the work ahead polls partition 0's records again (here:
# the rewind waits until they were polled). Those belong to the next transaction; taken
# for the sealed one's and dropped below what it consumed, they were lost to the
# consumer's position: partition 0 was never committed.
async def test_records_polled_during_an_aborts_rewind_are_kept(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eosflow._engine import _positions

    c = cluster
    c.create_topic("in", 2)
    c.create_topic("out", 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await p.start()
    await asyncio.gather(*[await p.send("in", f"v{i}".encode(), partition=0) for i in range(100)])

    class FailOnce(Spy):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if record.partition == 1 and not self.gate.is_set():
                self.gate.set()
                raise eosflow.TransactionError("not now")
            return await super().process(record)

    proc = FailOnce("out")
    app = eosflow.EosApp(proc, cfg(c, process_ahead=True, commit_interval_s=4, min_transaction_s=3))
    place = _positions.Positions.place
    repolled: list[bool] = []

    async def place_then_wait(
        self: _positions.Positions, consumer: Any, tps: list[TopicPartition], patient: bool = False
    ) -> None:
        await place(self, consumer, tps, patient)
        session = session_of(app)
        tp = TopicPartition("in", 0)
        if tp in tps and session is not None and session.in_transaction:

            async def polled_again() -> bool:
                return session._pos.polled.get(tp) == 100

            await eventually(polled_again, timeout_s=10, what="partition 0 polled again")
            repolled.append(True)

    monkeypatch.setattr(_positions.Positions, "place", place_then_wait)
    async with app:
        await until(app, lambda: (0, 99) in proc.seen, "partition 0 in the first transaction")
        await (await p.send("in", b"v100", partition=1))
        await p.stop()
        await until(app, lambda: all_done(app, c, 101), "all committed", timeout_s=20)
    assert repolled == [True] and app.stats.aborted == 1
    await assert_exactly_once(c, 101)


# Invariant 16, the safety net: work ahead that is not adopted is put back. Records polled
# after an abort's rewind (a window the app cannot rule out) would otherwise be skipped.
# After a commit, a partition with nothing committed goes back to the first record put
# back (not to the reset policy's start); otherwise it goes to its committed offset.
async def test_reposition_puts_unadopted_records_back(cluster: FakeCluster) -> None:
    from eosflow._engine._session import TransactSession

    c = cluster
    await seed(c)

    async def poll_all(s: TransactSession, n: int) -> list[eosflow.Record]:
        got: list[eosflow.Record] = []
        while len(got) < n:
            got += await s.poll(n - len(got), 1.0)
        return got

    session = TransactSession(cfg(c))
    await session.start()
    try:
        records = await poll_all(session, 100)
        await session.reposition(records[10:], committed=True)  # nothing committed yet
        assert (await poll_all(session, 1))[0].offset == 10
        await session.reposition(records[20:], committed=False)  # reset policy: earliest
        assert (await poll_all(session, 1))[0].offset == 0
        await session.reposition(records, committed=False)

        await session.begin(session.epoch)
        done = await poll_all(session, 30)
        session.mark_consumed({("in", 0): done[-1].offset + 1})
        assert await session.end(commit=True) is eosflow.Outcome.COMMITTED
        for committed in (True, False):
            ahead = await poll_all(session, 50)
            assert ahead[0].offset == 30
            await session.reposition(ahead[5:], committed=committed)  # to committed: 30
    finally:
        await session.stop()


# Outputs are produced as hand-built batches, which skip the size check producer.send
# makes. An output that can never be produced must stop the app with a clear error, not
# abort and retry the same transaction forever.
async def test_output_over_the_max_request_size_is_fatal(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, n=20)

    class Huge(Gate):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if record.offset == 10:
                return eosflow.Output(self.out, b"x" * 2_000_000)
            return await super().process(record)

    app = eosflow.EosApp(Huge("out"), cfg(c))
    with pytest.raises(eosflow.FatalError, match=r"max request size"):
        async with app:
            await until(app, lambda: False, "never", timeout_s=20)
    assert c.committed("g").get(("in", 0), 0) <= 10


# An output naming a partition its topic does not have can never be produced: the app
# stops saying which, instead of failing an assertion inside aiokafka.
async def test_output_to_a_missing_partition_is_fatal(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, n=20)

    class Misrouted(Gate):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            return eosflow.Output(self.out, record.value, partition=7)

    app = eosflow.EosApp(Misrouted("out"), cfg(c))
    with pytest.raises(eosflow.FatalError, match=r"out\[7\], but out has partitions \[0\]"):
        async with app:
            await until(app, lambda: False, "never", timeout_s=20)
    assert c.committed("g") == {}


class Counting(Spy):
    """Spy that counts completed assignments (``on_assigned`` runs after the committed
    offsets of the new partitions were fetched and applied)."""

    def __init__(self, out: str) -> None:
        super().__init__(out)
        self.assignments = 0

    async def on_assigned(self, partitions: frozenset[tuple[str, int]]) -> None:
        self.assignments += 1


# Invariant 17 (the rebalance race of issue 10): a revocation that lands after records were
# polled (or work ahead adopted) but before the transaction is formally open must still
# abort that transaction. aiokafka's `begin_transaction` always yields to the event loop;
# this test makes a whole rebalance -- revocation, rejoin with a new generation, stable
# offset fetch and seek back -- happen inside that yield of the second `begin`. Without
# the assignment epoch carried into the transaction AND without the TxnOffsetCommit and
# forced heartbeat carrying the generation of that assignment (the broker's fence, kept as
# defence in depth), records 50..99 commit twice: once in the transaction begun across
# the rebalance, once after the seek back. Without the epoch alone, the broker's fence
# aborts it, with another reason.
async def rebalance_inside_begin(
    c: FakeCluster, ahead: bool, meanwhile: Callable[[eosflow.EosApp], Awaitable[None]]
) -> tuple[eosflow.EosApp, Counting, int]:
    """Run 200 records in 50-record transactions; the first commit is held (until 50
    records are processed ahead, if ``ahead``); inside the next ``begin`` -- after its
    records were polled or its work ahead adopted -- ``meanwhile`` runs, then a whole
    rebalance. Returns the app (stopped once all is committed), the processor, and how
    many begins there were."""
    proc = Counting("out")
    hold = c.intercept("EndTxn", hold=True)
    app = eosflow.EosApp(proc, cfg(c, max_records_per_txn=50, process_ahead=ahead))
    begins = 0
    async with app:
        await hold.matched()
        if ahead:
            await until(app, lambda: len(proc.seen) == 100, "50 records processed ahead")
        session = session_of(app)
        assert session is not None
        producer = session.producer
        original = producer.begin_transaction

        async def begin_across_a_rebalance() -> None:
            nonlocal begins
            begins += 1
            if begins == 1:  # the transaction after the held commit
                await meanwhile(app)
                before = proc.assignments
                c.force_rebalance("g")
                await until(app, lambda: proc.assignments > before, "rebalance done")
            await original()

        producer.begin_transaction = begin_across_a_rebalance  # type: ignore[method-assign]
        hold.release()
        await until(app, lambda: all_done(app, c), "all committed")
    return app, proc, begins


async def nothing(app: eosflow.EosApp) -> None:
    return None


# Invariant 17 (the rebalance race of issue 10): a revocation that lands after records were
# polled (or work ahead adopted) but before the transaction is formally open must still
# abort that transaction. aiokafka's `begin_transaction` always yields to the event loop;
# this test makes a whole rebalance -- revocation, rejoin with a new generation, stable
# offset fetch and seek back -- happen inside that yield of the second `begin`. Without
# the assignment epoch carried into the transaction AND without the TxnOffsetCommit and
# forced heartbeat carrying the generation of that assignment (the broker's fence, kept as
# defence in depth), records 50..99 commit twice: once in the transaction begun across
# the rebalance, once after the seek back. Without the epoch alone, the broker's fence
# aborts it, with another reason.
@pytest.mark.parametrize("ahead", [True, False])
async def test_rebalance_inside_begin_aborts_the_transaction(
    cluster: FakeCluster, ahead: bool
) -> None:
    c = cluster
    await seed(c)
    app, proc, begins = await rebalance_inside_begin(c, ahead, nothing)
    assert begins >= 1 and proc.revoked_at, "the rebalance ran inside begin"
    await assert_exactly_once(c)
    # decided by the session from the assignment epoch, before any request; with only the
    # broker's generation fence left it would read "TxnOffsetCommit: ILLEGAL_GENERATION"
    assert app.stats.aborted == 1
    assert session_of(app).last_abort_reason == "partitions revoked"  # type: ignore[union-attr]


# Invariant 22's floor under a partition lost and given back: records were polled (or
# worked ahead) under one assignment; a rebalance inside `begin` takes the partition away,
# another member commits past those records meanwhile (the group's committed offset moves
# to 150, as the fleet's chaos saw on genuine 4.4 after a coordinator pause), and the
# partition comes back. The transaction is stale and must simply abort and rewind to 150.
# Check committed offsets as the floor of a stale transaction too (`mark_consumed` passing
# them whatever the epoch) and the app stops on "records would be committed twice".
@pytest.mark.parametrize("ahead", [True, False])
async def test_stale_records_below_a_moved_committed_offset_abort(
    cluster: FakeCluster, ahead: bool
) -> None:
    c = cluster
    await seed(c)

    async def another_member_commits(app: eosflow.EosApp) -> None:
        await until(
            app,
            lambda: c.committed("g", "in").get(("in", 0)) == 50,
            "the first commit's offsets landed",
        )
        group = c.groups.get("g")
        assert group is not None
        group.offsets[("in", 0)] = (150, None)

    app, _proc, _begins = await rebalance_inside_begin(c, ahead, another_member_commits)
    assert app.failure is None
    assert app.stats.aborted == 1
    assert session_of(app).last_abort_reason == "partitions revoked"  # type: ignore[union-attr]
    values = [v for _, _, v in await read_all(c.bootstrap_servers, "out")]
    expected = [f"v{i}".encode() for i in (*range(50), *range(150, N))]
    assert sorted(values) == sorted(expected), "50..149: aborted here, the other member's"


# Invariant 9 without KIP-360 (a 2.4 broker: InitProducerId below v3): a fencing answer
# cannot be told apart from a timed-out epoch, so it is fatal -- assuming a timeout and
# carrying on could run beside a newer instance. Remove the raise in `reinit`'s
# non-KIP-360 path (`_engine/_reinit.py`) and the app recovers and carries on instead.
async def test_fencing_without_kip360_is_fatal() -> None:
    settings = fake_settings()
    async with FakeCluster(
        ClusterSettings(profile="2.4", groups=settings.groups, txns=settings.txns)
    ) as c:
        await seed(c)
        rule = c.intercept("AddPartitionsToTxn", error=codes.INVALID_PRODUCER_EPOCH)  # once
        app = eosflow.EosApp(Gate("out"), cfg(c))
        with pytest.raises(eosflow.ProducerFencedError, match="tx-1"):
            async with app:
                await until(app, lambda: False, "never", timeout_s=20)
        assert rule.hits == 1
        assert app.stats.committed == 0 and c.committed("g") == {}
