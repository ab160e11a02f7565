"""Failure outcomes (issue 10): exhausted retries are errors, transient broker failures
abort and retry, persistent ones end ``run()`` with an eosflow error naming the step, and
nothing but eosflow's errors leaves ``run()``. Each test says what it guards and how it
fails without that mechanism."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kit import eventually, log_seen, read_all, session_of
from test_mechanisms import Gate, all_done, assert_exactly_once, cfg, seed, until

import eosflow
from eosflow._protocol import _codes as codes
from eosflow.testing import FakeCluster, check_exactly_once, spawn_run
from eosflow.testing._ladder import fake_settings

ROOT = Path(__file__).parents[2]


# Exhausted retries are an error. Every TxnOffsetCommit is dropped: no transaction may
# commit (its outputs would become visible without their offsets), and once failures
# outlast retry_timeout_s the app stops naming the step. With `send_retrying` returning
# 0 ("no error") after its last attempt -- the old behaviour -- outputs are committed
# while the group's offsets stay empty.
async def test_offsets_that_never_commit_never_let_the_transaction_commit(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await seed(c, n=50)
    rule = c.intercept("TxnOffsetCommit", drop=True, times=None)
    app = eosflow.EosApp(Gate("out"), cfg(c, transaction_timeout_s=2.0, retry_timeout_s=3.0))
    with pytest.raises(eosflow.FatalError, match="TxnOffsetCommit"):
        async with app:
            await until(app, lambda: False, "never", timeout_s=30)
    assert rule.hits > 1
    assert app.stats.committed == 0 and app.stats.aborted >= 1
    assert c.committed("g") == {}
    assert await read_all(c.bootstrap_servers, "out") == []


# The reproduction: TxnOffsetCommit dropped 60 times (longer than one step's
# retry budget), then the instance is SIGKILLed and restarted. Every transaction that
# committed had its offsets, so the restart redoes nothing that was committed. Without
# the fix, transactions committed without offsets and the restart duplicated them.
async def test_dropped_offset_commits_then_a_crash_is_exactly_once(cluster: FakeCluster) -> None:
    c = cluster
    n = 800
    await seed(c, n=n, partitions=2)
    rule = c.intercept("TxnOffsetCommit", drop=True, times=60)
    env = {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'procs'}",
        "CHAOS_OUT": "out",
        "EOSFLOW_SESSION_TIMEOUT_S": "6",
        "EOSFLOW_HEARTBEAT_INTERVAL_S": "0.2",
        "EOSFLOW_TRANSACTION_TIMEOUT_S": "2",
        "EOSFLOW_MAX_RECORDS_PER_TXN": "50",
    }

    async def start() -> asyncio.subprocess.Process:
        return await spawn_run(
            "slow_copy:SlowCopy",
            bootstrap_servers=c.bootstrap_servers,
            group_id="g",
            input_topics=("in",),
            transactional_id="tx-crash",
            env=env,
        )

    proc = await start()
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while not rule.exhausted or not c.committed("g"):
            assert proc.returncode is None, f"instance died ({proc.returncode})"
            assert asyncio.get_running_loop().time() < deadline, "no commit after the drops"
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        proc = await start()
        while sum(c.committed("g", "in").values()) < n:
            assert proc.returncode is None, f"restarted instance died ({proc.returncode})"
            assert asyncio.get_running_loop().time() < deadline + 60, "stalled after restart"
            await asyncio.sleep(0.1)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 30)
    report = await check_exactly_once(c.bootstrap_servers, "in", "out", match="value")
    assert report.ok, report.summary()


# One transient error answer to AddPartitionsToTxn (aiokafka's producer goes fatal on
# it, and its abort then fails an internal assertion) aborts or recovers the transaction;
# it does not end the app. Before, run() ended with aiokafka's KafkaError or
# AssertionError('Invalid state transition FATAL_ERROR -> ABORTING_TRANSACTION').
@pytest.mark.parametrize("error", [codes.REQUEST_TIMED_OUT, codes.UNKNOWN_SERVER_ERROR])
async def test_one_transient_add_partitions_error_is_survived(
    cluster: FakeCluster, error: int
) -> None:
    c = cluster
    await seed(c)
    rule = c.intercept("AddPartitionsToTxn", error=error)
    app = eosflow.EosApp(Gate("out"), cfg(c))
    async with app:
        await until(app, lambda: all_done(app, c), "all committed")
    assert rule.hits == 1 and app.stats.aborted + app.stats.recovered >= 1
    await assert_exactly_once(c)


# A permission refused inside the commit's own requests (not on metadata, which usually
# refuses first) stops the app naming the permission and the resource: READ on the topic
# TxnOffsetCommit refused, READ on the group AddOffsetsToTxn refused. Nothing commits.
# Without the adapter reading the refused topics out of the per-partition answer, the
# message says "READ or WRITE on a topic".
@pytest.mark.parametrize(
    ("api", "error", "names"),
    [
        ("TxnOffsetCommit", codes.TOPIC_AUTHORIZATION_FAILED, "refused READ on topic in "),
        ("AddOffsetsToTxn", codes.GROUP_AUTHORIZATION_FAILED, "refused READ on the group "),
    ],
)
async def test_permission_refused_in_the_commit_is_fatal_and_named(
    cluster: FakeCluster, api: str, error: int, names: str
) -> None:
    c = cluster
    await seed(c)
    rule = c.intercept(api, error=error, times=None)
    app = eosflow.EosApp(Gate("out"), cfg(c))
    with pytest.raises(eosflow.AuthorizationError) as raised:
        await asyncio.wait_for(app.run(), 60)
    assert f"{api}: not authorized: the broker {names}" in str(raised.value)
    assert rule.hits == 1 and app.stats.committed == 0
    assert c.committed("g") == {}
    assert await read_all(c.bootstrap_servers, "out") == []


# Three UNKNOWN_SERVER_ERROR answers to Produce broke the idempotent producer's sequence
# state and left the app aborting forever (1,809 aborts, no progress). A failed produce
# now re-initialises the producer (a new epoch clears the sequences).
async def test_failed_produce_does_not_livelock(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    rule = c.intercept("Produce", error=codes.UNKNOWN_SERVER_ERROR, times=3)
    app = eosflow.EosApp(Gate("out"), cfg(c))
    async with app:
        await until(app, lambda: all_done(app, c), "all committed", timeout_s=30)
    assert rule.hits == 3 and app.stats.recovered >= 1
    assert app.stats.aborted + app.stats.recovered < 20, app.stats
    await assert_exactly_once(c)


# Nothing listens on the bootstrap address: run() ends with a FatalError naming it (not
# aiokafka's KafkaConnectionError), having closed the producer it tried to start.
async def test_unreachable_bootstrap_is_fatal_and_named() -> None:
    config = eosflow.EosConfig(
        bootstrap_servers="127.0.0.1:1", group_id="g", input_topics=("in",), transactional_id="t"
    )
    app = eosflow.EosApp(Gate("out"), config)
    with pytest.raises(eosflow.FatalError, match=r"127\.0\.0\.1:1"):
        await asyncio.wait_for(app.run(), 60)


# A missing output topic with auto-creation off used to livelock the app (40 s metadata
# waits, abort, retry with half the records, forever). It stops naming the topic, after
# a bounded wait, with nothing committed. Without the bound in `_produce._ready` the app
# waits aiokafka's 40 s request timeout, then aborts and retries: the test times out.
async def test_missing_output_topic_is_fatal_and_named() -> None:
    async with FakeCluster(fake_settings()) as c:
        c.auto_create_topics = False
        c.create_topic("in", 1)
        await seed_input_only(c, 20)

        class ToNowhere(Gate):
            async def process(self, record: eosflow.Record) -> eosflow.Output:
                return eosflow.Output("nowhere", record.value)

        app = eosflow.EosApp(ToNowhere("out"), cfg(c, transaction_timeout_s=2.0))
        # the bound: well under aiokafka's own 40 s metadata wait
        with pytest.raises(eosflow.FatalError, match="output topic 'nowhere'"):
            await asyncio.wait_for(app.run(), 20)
        assert c.committed("g") == {}


# An output topic whose metadata does not come back in time because the cluster does
# not answer at all (brokers back from an outage: CI's three-broker chaos lost an
# instance this way) is no missing topic: the transaction aborts and is retried. Metadata
# answers are held past the wait once the app runs; then they flow again. Caught: the
# timeout taken for a missing topic (the app stopped with "has no metadata").
async def test_unanswered_metadata_of_an_output_topic_is_retried() -> None:
    async with FakeCluster(fake_settings()) as c:
        c.auto_create_topics = False
        c.create_topic("in", 1)

        class ToElsewhere(Gate):
            async def process(self, record: eosflow.Record) -> eosflow.Output:
                return eosflow.Output("elsewhere", record.value)

        app = eosflow.EosApp(ToElsewhere("out"), cfg(c, transaction_timeout_s=2.0))
        async with app:
            await until(app, lambda: session_of(app) is not None, "the session")
            c.create_topic("elsewhere", 1)  # unknown to the producer's metadata so far
            held = c.intercept("Metadata", delay_s=1.5, times=None)  # the wait is 0.5 s
            await seed_input_only(c, 20)
            await until(app, lambda: app.stats.aborted >= 1, "a transaction aborted")
            c.remove_fault(held)
            await until(app, lambda: sum(c.committed("g").values()) == 20, "all committed")
        assert len(await read_all(c.bootstrap_servers, "elsewhere")) == 20


async def seed_input_only(c: FakeCluster, n: int) -> None:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await p.start()
    try:
        await asyncio.gather(*[await p.send("in", f"v{i}".encode()) for i in range(n)])
    finally:
        await p.stop()


class Returns(Gate):
    """Returns ``bad`` for record 5 and pass-through outputs otherwise."""

    def __init__(self, out: str, bad: object) -> None:
        super().__init__(out)
        self.bad = bad

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        if record.offset == 5:
            return self.bad  # type: ignore[return-value]
        return await super().process(record)


# A process() result of the wrong type names the record and follows the error policy:
# fatal without a dead-letter topic (before: a raw TypeError traceback that did not name
# the record, and said "str" for a dict) ...
@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("text", "returned str"),
        ({"k": "v"}, "returned dict"),
        (eosflow.Output("out", 42), "Output.value for out is int"),  # type: ignore[arg-type]
    ],
)
async def test_wrong_result_type_names_the_record(
    cluster: FakeCluster, bad: object, said: str
) -> None:
    c = cluster
    await seed(c, n=20)
    app = eosflow.EosApp(Returns("out", bad), cfg(c))
    with pytest.raises(eosflow.ProcessingError, match=rf"in\[0\]@5: TypeError: .*{said}") as e:
        async with app:
            await until(app, lambda: False, "never", timeout_s=20)
    assert c.committed("g").get(("in", 0), 0) <= 5
    # the line says how to go on past such a record (issue 51.3)
    assert "EOSFLOW_DEAD_LETTER_TOPIC, --dead-letter-topic" in str(e.value)
    assert "\n" not in str(e.value)


# ... and dead-lettered with one (before: the app stopped all the same).
async def test_wrong_result_type_is_dead_lettered(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, n=20)
    c.create_topic("dlq", 1)
    app = eosflow.EosApp(Returns("out", {"k": "v"}), cfg(c, dead_letter_topic="dlq"))
    async with app:
        await until(app, lambda: all_done(app, c, 20), "all committed")
    dlq = await read_all(c.bootstrap_servers, "dlq")
    assert [v for _, _, v in dlq] == [b"v5"]
    out = [v for _, _, v in await read_all(c.bootstrap_servers, "out")]
    assert sorted(out) == sorted(f"v{i}".encode() for i in range(20) if i != 5)  # type: ignore[type-var]


# Output accepts str for key and value, encoded as UTF-8 (documented on Output); before,
# a str value failed deep inside aiokafka's record builder.
async def test_str_outputs_are_utf8(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, n=20)

    class Text(Gate):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            assert record.value is not None
            return eosflow.Output("out", record.value.decode() + "é", key="k")

    app = eosflow.EosApp(Text("out"), cfg(c))
    async with app:
        await until(app, lambda: all_done(app, c, 20), "all committed")
    out = [v for _, _, v in await read_all(c.bootstrap_servers, "out")]
    assert sorted(out) == sorted(f"v{i}é".encode() for i in range(20))  # type: ignore[type-var]


# The cases beyond what the fault matrix sends (it leaves out error codes Kafka's
# group coordinator does not answer these with): JoinGroup and SyncGroup answered
# REQUEST_TIMED_OUT or UNKNOWN_SERVER_ERROR ended `eosflow run` with a raw aiokafka
# KafkaError (at start: `consumer.start()` raises them). Now the start is retried from
# scratch and a poll that meets them is retried; the app finishes exactly once. (OffsetFetch
# answered so is not survived yet: aiokafka's own committed-offset refresh task ends on it
# and its coordinator stops making progress -- see the issue notes.)
@pytest.mark.parametrize("api", ["JoinGroup", "SyncGroup"])
@pytest.mark.parametrize("error", [codes.REQUEST_TIMED_OUT, codes.UNKNOWN_SERVER_ERROR])
async def test_group_requests_answered_with_errors_are_survived(
    cluster: FakeCluster, api: str, error: int
) -> None:
    c = cluster
    await seed(c)
    rule = c.intercept(api, error=error, times=2)
    app = eosflow.EosApp(Gate("out"), cfg(c))
    async with app:
        await until(app, lambda: all_done(app, c), "all committed", timeout_s=40)
    assert rule.hits == 2
    await assert_exactly_once(c)


# A partition leader that stops answering Produce (a SIGSTOPped broker in the genuine
# chaos test, tests/genuine/test_chaos_brokers.py) leaves the partition's batches queued:
# aiokafka's accumulator then refuses the next batch after its request timeout with a
# KafkaTimeoutError, which is not marked retriable. It must be a TransientError (the
# transaction is doomed and retried), not a FatalError: before, the instance exited 1
# with "fatal: producing outputs: KafkaTimeoutError". The producer here has a 0.5 s
# request timeout (eosflow keeps aiokafka's 40 s) so the wait runs out quickly.
async def test_produce_queue_timeout_on_a_hung_leader_is_transient(cluster: FakeCluster) -> None:
    from eosflow._errors import TransientError

    held = _queued_behind_a_held_batch(cluster, "hung", 5.0, request_timeout_ms=500)
    async with held as (send, _sends):
        with pytest.raises(TransientError, match="KafkaTimeoutError"):
            await send()  # the queue does not drain


# The same queue with aiokafka's own request timeout (40 s, which eosflow keeps): the wait
# for the partition's queue is eosflow's to bound (the session passes the transaction
# timeout). Before, a password rotated mid-run held a serial loop in send_all for the 40 s
# (tests/genuine/test_credentials.py: 59 s from rotation to the error, bound 30). Without
# the bound in _produce._hand_over this waits the 10 s of the test's own limit.
async def test_a_batch_waits_for_a_hung_partition_queue_only_the_given_bound(
    cluster: FakeCluster,
) -> None:
    from eosflow._errors import TransientError

    async with _queued_behind_a_held_batch(cluster, "queued", 0.5) as (send, sends):
        began = time.monotonic()
        with pytest.raises(
            TransientError, match=r"out\[0\] was not queued within the transaction's time"
        ):
            await asyncio.wait_for(send(), 10)
        assert time.monotonic() - began < 5
        assert len(sends) == 2  # the refused batch was not queued


@contextlib.asynccontextmanager
async def _queued_behind_a_held_batch(
    c: FakeCluster, transactional_id: str, queue_timeout_s: float, **producer: Any
) -> AsyncIterator[tuple[Callable[[], Awaitable[None]], list[asyncio.Future[object]]]]:
    """A transactional producer whose first batch to out[0] is held by the cluster and
    whose second is queued behind it; yields a call that sends one more, and the send
    futures handed over so far."""
    from aiokafka import AIOKafkaProducer

    from eosflow import _aiokafka as ak
    from eosflow._aiokafka import _produce

    c.create_topic("out", 1)
    p = AIOKafkaProducer(
        bootstrap_servers=c.bootstrap_servers, transactional_id=transactional_id, **producer
    )
    await p.start()
    rule = c.intercept("Produce", hold=True, times=None)
    part, sends = ak.Partitioner(p), list[asyncio.Future[object]]()
    out = [eosflow.Output("out", b"v", partition=0)]

    async def send() -> None:
        await _produce.send_all(p, part, out, sends, 5.0, queue_timeout_s)

    try:
        await p.begin_transaction()
        await send()  # in flight, held
        await rule.matched()
        await send()  # queued behind it
        yield send, sends
    finally:
        rule.release()
        c.remove_fault(rule)
        await ak.close_producer(p, timeout_s=5.0)


# A fencing answer (here INVALID_PRODUCER_EPOCH to EndTxn) is resolved by KIP-360:
# InitProducerId with the current id and epoch. When that request goes unanswered for
# longer than one step's budget (the transaction coordinator's broker hung:
# tests/genuine/test_chaos_brokers.py, where a woken zombie met a SIGSTOPped broker),
# nothing says a newer instance owns the transactional id: the re-init is resent (up
# to retry_timeout_s) and the app recovers.
# Before, the session raised ProducerFencedError ("owned by a newer instance") after
# transaction_timeout_s without an answer, and the instance exited 1.
async def test_unanswered_reinit_after_fencing_is_retried_not_fatal(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await seed(c)
    c.intercept("EndTxn", error=codes.INVALID_PRODUCER_EPOCH)
    inits = c.intercept("InitProducerId", version=4, drop=True, times=None)
    app = eosflow.EosApp(Gate("out"), cfg(c, transaction_timeout_s=1.0, retry_timeout_s=20.0))
    async with app:
        await inits.matched()
        await asyncio.sleep(2.5)  # unanswered for 2.5 transaction timeouts (the fault's span)
        c.remove_fault(inits)
        await until(app, lambda: all_done(app, c), "all committed")
    assert inits.hits >= 2 and app.stats.recovered >= 1
    await assert_exactly_once(c)


# A failed fetch puts aiokafka's pending fetch task to sleep for its retry backoff, and
# stopping the consumer then cancels and awaits that task, which raises CancelledError
# out of `consumer.stop()` -- not a cancellation of ours. In the genuine CI it replaced
# the AuthenticationError that was stopping the app (tests/genuine/test_credentials.py)
# and left the consumer's connections open. The backoff is long here so the close lands
# inside it every time; `ak.close_consumer` must swallow that error and finish the
# close. With `await consumer.stop()` as its body, the close raises CancelledError.
async def test_closing_while_a_failed_fetch_backs_off_is_clean(cluster: FakeCluster) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from eosflow import _aiokafka as ak

    c = cluster
    await seed(c, n=5)
    consumer = AIOKafkaConsumer(bootstrap_servers=c.bootstrap_servers, retry_backoff_ms=60_000)
    with log_seen("aiokafka.consumer.fetcher", "Failed fetch messages") as failed:
        await consumer.start()
        consumer.assign([TopicPartition("in", 0)])
        await consumer.seek_to_beginning()
        assert len((await consumer.getmany(timeout_ms=10_000))[TopicPartition("in", 0)]) == 5
        rule = c.intercept("Fetch", drop=True, times=None)
        await asyncio.wait_for(failed.wait(), 30)
        await asyncio.wait_for(ak.close_consumer(consumer, timeout_s=5.0), 20)
    assert rule.hits >= 1
    assert not [conn for conn in consumer._client._conns.values() if conn.connected()]


# A producer whose transaction coordinator cannot be found any more (FindCoordinator
# answered COORDINATOR_NOT_AVAILABLE for good, as a login refused mid-run made it on
# genuine Kafka in tests/genuine/test_credentials.py): its stop() times out, and the
# forced close cancels the sender. Cancelled, aiokafka's sender awaits its sub-tasks,
# and the one retrying the lookup never ends, so a single cancel left the close hanging
# for ever. `_cancel_until_done` cancels again through that await. With one cancel and
# an unbounded await in its place, the wait_for below runs out.
async def test_closing_a_producer_stuck_finding_its_coordinator_ends(cluster: FakeCluster) -> None:
    from aiokafka import AIOKafkaProducer

    from eosflow import _aiokafka as ak

    c = cluster
    c.create_topic("out", 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id="stuck")
    await p.start()
    await p.begin_transaction()
    c.intercept("AddPartitionsToTxn", error=codes.NOT_COORDINATOR, times=None)
    lookups = c.intercept("FindCoordinator", error=codes.COORDINATOR_NOT_AVAILABLE, times=None)
    await p.send("out", b"v")  # queued; its partition is never added

    async def looping() -> bool:
        return lookups.hits >= 2

    await eventually(looping, timeout_s=30, what="the coordinator lookup retried")
    await asyncio.wait_for(ak.close_producer(p, timeout_s=1.0), 30)
    assert p._sender.sender_task.done()


# A group coordinator that cannot answer for a while (SIGSTOPped, or moved and still
# loading its partition: COORDINATOR_LOAD_IN_PROGRESS) while new partitions are
# positioned. Those partitions cannot be fetched from before their committed offsets are
# read, so a failure there stops the app, and the fetch is retried for retry_timeout_s:
# as long as any other broker failure. Before, it was retried for twice the transaction
# timeout only, and the genuine chaos test's instance that rejoined as its coordinator's
# broker was SIGSTOPped exited 1 ("fetching the committed offsets of newly assigned
# partitions failed"). Here the coordinator answers so for 1.75 times that budget; with
# the short budget the app stops.
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_offsets_of_new_partitions_are_fetched_through_a_coordinator_outage(
    cluster: FakeCluster, protocol: str
) -> None:
    c = cluster
    await seed(c, partitions=2)
    txn_s = 1.0
    # eosflow's own stable fetch (aiokafka's classic consumer sends older versions)
    loading = c.intercept(
        "OffsetFetch", error=codes.COORDINATOR_LOAD_IN_PROGRESS, times=None, version=9
    )
    config = cfg(c, group_protocol=protocol, transaction_timeout_s=txn_s, retry_timeout_s=30.0)
    app = eosflow.EosApp(Gate("out"), config)
    async with app:
        await loading.matched()
        await asyncio.sleep(3.5 * txn_s)  # the outage's span
        assert app.failure is None, app.failure
        c.remove_fault(loading)
        await until(app, lambda: all_done(app, c), "all committed")
    assert loading.hits >= 4, loading.hits
    await assert_exactly_once(c)
