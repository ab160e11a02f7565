"""Liveness under faults (issue 50): an instance that meets a fault at start-up, or whose
recovery cannot finish while its input is idle, gets going again on its own once the
fault is over -- and stays exactly once. Each test says how it fails without its
mechanism (checked by removing it)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition
from kit import eventually, session_of
from test_mechanisms import Gate, all_done, assert_exactly_once, cfg, seed, until

import eosflow
from eosflow import _aiokafka as ak
from eosflow._protocol import _codes as codes
from eosflow.testing import FakeCluster

START_FAULTS = {
    "unknown_server_error": dict(error=codes.UNKNOWN_SERVER_ERROR, times=3),
    "coordinator_not_available": dict(error=codes.COORDINATOR_NOT_AVAILABLE, times=3),
    "dropped": dict(drop=True, times=3),
}


# Issue 50, hang 1: under the classic protocol, OffsetFetch failing from the start (the
# rule in place before the instance joins). Partitions with nothing committed were
# positioned by aiokafka's seek_to_beginning, which waits (up to its 40 s request
# timeout) behind aiokafka's own committed-offset refresh -- an OffsetFetch of aiokafka's
# to a coordinator its coordination routine finds again only after eosflow's rebalance
# callback, waiting there, returned; UNKNOWN_SERVER_ERROR ended that refresh for good and
# the app stopped ("group membership stopped"). Now eosflow positions them itself
# (ListOffsets to each leader) and aiokafka sends no OffsetFetch of its own. Without
# ``_own_positions`` the app stops or stalls; without ``log_offsets`` (aiokafka's seek)
# it stalls 40 s a partition: either way not done within the bound.
@pytest.mark.parametrize("fault", sorted(START_FAULTS))
async def test_start_through_a_failing_offset_fetch(cluster: FakeCluster, fault: str) -> None:
    c = cluster
    await seed(c, partitions=2)
    rule = c.intercept("OffsetFetch", **START_FAULTS[fault])  # type: ignore[arg-type]
    app = eosflow.EosApp(Gate("out"), cfg(c, transaction_timeout_s=2.0))
    async with app:
        await until(app, lambda: all_done(app, c), "all committed", timeout_s=15)
    assert rule.hits == 3
    await assert_exactly_once(c)


# The position of a partition with nothing committed comes from its leader, retried:
# ListOffsets answered NOT_LEADER_OR_FOLLOWER and then dropped, at start, is retried
# within the budget and the app finishes. Without the retries (one attempt) the start
# fails and the app stops.
async def test_start_through_failing_list_offsets(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, partitions=2)
    wrong = c.intercept("ListOffsets", error=codes.NOT_LEADER_OR_FOLLOWER, times=2)
    app = eosflow.EosApp(Gate("out"), cfg(c, transaction_timeout_s=2.0))
    async with app:
        await wrong.matched()
        dropped = c.intercept("ListOffsets", drop=True, times=2)
        await until(app, lambda: all_done(app, c), "all committed", timeout_s=15)
    assert wrong.hits == 2 and dropped.hits == 2
    await assert_exactly_once(c)


# ListOffsets that never answers at start is a bounded, named outcome: the app stops
# with a FatalError naming ListOffsets and the partitions, within its retry budget --
# neither a hang nor a success. Without the deadline the callback would wait for ever.
async def test_list_offsets_never_answered_at_start_is_fatal_and_named(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await seed(c, partitions=1)
    rule = c.intercept("ListOffsets", error=codes.UNKNOWN_SERVER_ERROR, times=None)
    app = eosflow.EosApp(Gate("out"), cfg(c, transaction_timeout_s=1.0, retry_timeout_s=3.0))
    with pytest.raises(eosflow.FatalError, match=r"ListOffsets.*in\[0\].*UNKNOWN_SERVER_ERROR"):
        async with asyncio.timeout(30):
            async with app:
                await until(app, lambda: False, "never", timeout_s=30)
    assert rule.hits > 1
    assert c.committed("g") == {}


# Issue 50, hang 2: a recovery that cannot finish is retried on the session's own clock.
# After the first commit a Produce fails (the producer is replaced, KIP-360) while every
# FindCoordinator is dropped for 5 s: the new producer cannot start, and every record
# has been polled by then (the input idle). Before, the recovery ran only from the next
# begin, which needs a polled record: 0 commits, for ever. Remove the engine's
# ``session.broken`` check and nothing commits after the fault.
async def test_a_recovery_that_failed_finishes_with_the_input_idle(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, partitions=2)
    app = eosflow.EosApp(
        Gate("out"), cfg(c, transaction_timeout_s=2.0, max_records_per_txn=20, retry_timeout_s=60)
    )
    async with app:
        await until(app, lambda: bool(c.committed("g")), "a first commit")
        find = c.intercept("FindCoordinator", drop=True, times=None)
        produce = c.intercept("Produce", error=codes.UNKNOWN_SERVER_ERROR)
        await produce.matched()

        async def lookup_dropped() -> bool:
            return find.hits > 0

        await eventually(lookup_dropped, what="the new producer's lookup dropped")
        await asyncio.sleep(5)
        c.remove_fault(find)
        await until(app, lambda: all_done(app, c), "all committed after the fault", timeout_s=20)
    assert app.stats.recovered >= 1
    await assert_exactly_once(c)


# An abort's rewind sends a partition with nothing committed to where the reset policy
# says; when that log start cannot be read (ListOffsets dropped past its budget), the
# partition is left where it was -- past the aborted records -- and the session is
# broken: nothing is polled until a recovery has put every partition back. Without
# marking it broken, the next transaction takes the records after the aborted ones and
# commits past them: the aborted records are lost.
async def test_a_rewind_that_cannot_read_the_log_start_recovers_first(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await seed(c, partitions=1)
    armed: list[object] = []

    class FailFirst(Gate):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if not armed and record.offset == 0:
                rule = c.intercept("ListOffsets", drop=True, times=None)
                armed.append(rule)
                asyncio.get_running_loop().call_later(5.0, c.remove_fault, rule)
                raise eosflow.TransactionError("abort the first transaction")
            return await super().process(record)

    app = eosflow.EosApp(FailFirst("out"), cfg(c, transaction_timeout_s=1.0, retry_timeout_s=60))
    async with app:
        await until(app, lambda: all_done(app, c), "all committed", timeout_s=30)
        session = session_of(app)
        assert session is not None and not session.broken
    assert app.stats.aborted >= 1 and armed and armed[0].hits > 1  # type: ignore[attr-defined]
    await assert_exactly_once(c)


# aiokafka's heartbeat loop (classic protocol) answered UNKNOWN_SERVER_ERROR three times:
# its heartbeat task ended for good on the first ("Unexpected exception in heartbeat
# task"), and the app stopped ("group membership stopped"): the fault sweep's
# Heartbeat.loop cases, fatal in every mode and arm. Now a failed heartbeat, sent again
# until the session ends. Without ``_patient`` the app stops.
async def test_heartbeats_answered_unknown_server_error_are_sent_again(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await seed(c, partitions=2)
    app = eosflow.EosApp(Gate("out"), cfg(c, transaction_timeout_s=2.0))
    async with app:
        await until(app, lambda: bool(c.committed("g")), "a first commit")
        rule = c.intercept("Heartbeat", version=1, error=codes.UNKNOWN_SERVER_ERROR, times=3)
        await rule.matched()
        await until(app, lambda: rule.exhausted and all_done(app, c), "all committed")
    await assert_exactly_once(c)


# Issue 51.10: under the classic protocol a JoinGroup is answered only once every member
# has rejoined or the rebalance timeout (60 s) has passed, but aiokafka gave it its
# request timeout, 40 s, like any request: a join answered later was given up, the
# connection closed and the join sent again (the rebalance starting over: two minutes in
# one run). Here the coordinator answers the first JoinGroup after 42 s. Now it is waited
# for (``_long_joins``: the rebalance timeout and 5 s) and no JoinGroup is sent again;
# without it the join times out at 40 s and a second one goes out.
async def test_a_join_answered_after_aiokafkas_request_timeout_is_waited_for(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await seed(c)
    slow = c.intercept("JoinGroup", delay_s=42.0, times=1)
    later = c.intercept("JoinGroup", times=None)  # counts the JoinGroups after the first
    app = eosflow.EosApp(Gate("out"), cfg(c, rebalance_timeout_s=60.0))
    async with app:
        await slow.matched()
        await until(app, lambda: all_done(app, c), "all committed", timeout_s=60)
    assert slow.hits == 1
    joins_again = [b for b in later.bodies if b.get("member_id")]
    assert later.hits == len(joins_again) <= 1, later.bodies  # KIP-394: one more, with its id
    await assert_exactly_once(c)


# A position reset refused for leadership asks for metadata before it asks again.
# aiokafka's fetcher alone retries the ListOffsets against the leader it knew: on genuine
# Kafka 4.4.0 a restore consumer asked a resumed broker for 2 minutes while the stores
# stood still (the broker chaos test). Here each refused ListOffsets of the restore
# consumer is followed by a Metadata request, and the reset then succeeds. Caught:
# refreshes_leaders not applied (no Metadata request at all).
async def test_a_reset_refused_for_leadership_asks_for_metadata_first(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await seed(c, n=5)
    config = cfg(c)
    consumer = await ak.state_reader(config, "restore", 100)
    who = f"{config.client_id}-restore"
    try:
        tp = TopicPartition("in", 0)
        metadata = c.intercept("Metadata", client_id=who, times=None)  # counted, answered
        refused = c.intercept(
            "ListOffsets", error=codes.NOT_LEADER_OR_FOLLOWER, client_id=who, times=3
        )
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[object] = []

        async def read() -> bool:
            batch = await consumer.getmany(timeout_ms=100)
            got.extend(r for rs in batch.values() for r in rs)
            return len(got) == 5

        await eventually(read, timeout_s=20, what="the log's records after the resets")
        assert refused.hits == 3
        assert metadata.hits >= 3, f"{metadata.hits} Metadata requests for 3 refusals"
    finally:
        await ak.close_consumer(consumer, timeout_s=5.0)
