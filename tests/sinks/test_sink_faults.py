"""``PostgresSink`` (issue 35) when the database fails it: a connection killed mid-write,
the server SIGKILLed, a COMMIT whose answer is lost, a FATAL out of turn, the database
gone for good. A real PostgreSQL from the test kit in every test, the faults made by the
server itself or by a proxy on its wire (``tests/pgwire.py``); the rows land in a table
without a unique constraint, so a duplicate would show. Each test says the mutation it
catches."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from kit import app_config, eventually
from pgwire import CommitOutcomeUnknown, CommitReplyLost, FatalOutOfTurn
from sinkkit import PARTS, N, Rows, at_the_end, exactly_once, rows, rows_database, seed, written

import eosflow
from eosflow._servers import Postgres
from eosflow.sinks._offsets import OffsetsTable
from eosflow.testing import FakeCluster


@pytest.fixture
async def postgres() -> AsyncIterator[Postgres]:
    async with rows_database() as pg:
        yield pg


# Rows and positions commit in one database transaction. A trigger kills the connection
# the first time a position moves -- after the batch's rows went in, before COMMIT -- so
# the instance cannot know the outcome. Nothing of that batch may stay, and it is written
# again once. Mutation: the rows committed before the positions move (two transactions)
# -- the killed batch's rows stay and are written again: duplicates.
async def test_a_write_killed_midway_leaves_nothing(
    cluster: FakeCluster, postgres: Postgres
) -> None:
    c = cluster
    c.create_topic("in", PARTS)
    await seed(c.bootstrap_servers, "in", N, PARTS)
    conn = await asyncpg.connect(postgres.dsn)
    await OffsetsTable("eosflow_offsets", "g").ensure(conn)
    await conn.execute(KILL_ONCE)
    await conn.close()
    app = eosflow.EosApp(Rows(postgres.dsn), app_config(c))
    async with app:
        await written(postgres)
        await eventually(lambda: _settled(app), what="a commit after the kill")
    exactly_once(await rows(postgres), "in")
    assert app.stats.aborted + app.stats.recovered >= 1


# a sequence, since a flag in a table would be rolled back with the killed transaction
KILL_ONCE = """
CREATE SEQUENCE kills;
CREATE FUNCTION kill_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('kills') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER kill_once BEFORE UPDATE ON eosflow_offsets FOR EACH ROW
  WHEN (OLD.next_offset IS DISTINCT FROM NEW.next_offset) EXECUTE FUNCTION kill_once();
"""


async def _settled(app: eosflow.EosApp) -> bool:
    assert app.failure is None, app.failure
    return app.last_outcome is eosflow.Outcome.COMMITTED


# PostgreSQL itself SIGKILLed (its whole process group) mid-run and started again: the
# instance waits it out and every record lands once. The failed writes are reported as
# the database's (issue 51.9: they read "broker_error"), and once all is written the
# sink's lag is 0 on every partition it holds (it read "lag 0 over 0 partitions").
async def test_the_database_killed_and_restarted(cluster: FakeCluster, postgres: Postgres) -> None:
    c = cluster
    c.create_topic("in", PARTS)
    await seed(c.bootstrap_servers, "in", N, PARTS)
    reports = Reports()
    app = eosflow.EosApp(Rows(postgres.dsn), app_config(c, max_records_per_txn=50), [reports])
    async with app:
        await written(postgres, 100)
        postgres.kill()
        await seed(c.bootstrap_servers, "in", N, PARTS)  # more to write, none written

        async def lagging() -> bool:
            at = app._runtime.partition_offsets()  # type: ignore[union-attr]
            return sum(o.lag for o in at.values()) >= N

        await eventually(lagging, timeout_s=20, what="the new records counted as lag")
        await postgres.start()
        await written(postgres, 2 * N)

        async def no_lag() -> bool:
            at = app._runtime.partition_offsets()  # type: ignore[union-attr]
            return len(at) == PARTS and {o.lag for o in at.values()} == {0}

        await eventually(no_lag, timeout_s=20, what="lag 0 on every partition")
    reasons = {r.reason for r in reports.seen if r.outcome is not eosflow.Outcome.COMMITTED}
    assert eosflow.AbortReason.DATABASE_ERROR in reasons, reasons
    assert eosflow.AbortReason.BROKER_ERROR not in reasons, reasons


class Reports(eosflow.Observer):
    def __init__(self) -> None:
        self.seen: list[eosflow.TransactionReport] = []

    def transaction_ended(self, report: eosflow.TransactionReport) -> None:
        self.seen.append(report)


# A FATAL out of turn -- after a statement's ReadyForQuery, with no statement running --
# leaves asyncpg's protocol state lost: the next statement raises InternalClientError
# and asyncpg closes the connection. The step fails for a passing reason, a new
# connection is made, and every record lands once. The case picks the transaction and
# the statement it follows: at start (the offsets table made), or in a write (after
# BEGIN, the claim's check, the user's COPY...). CI's chaos met it as PostgreSQL was
# SIGKILLed: "fatal: unexpected InternalClientError". Mutations caught: the error left
# unmapped -- the app stops on it (the last case: the FATAL lands before COMMIT, CI's
# "cannot switch to state 15"; elsewhere asyncpg closes the connection and the
# transaction's exit raises an InterfaceError instead); start's steps not retried --
# the app stops at start (the first case). Not caught: the connection dropped after a
# failed step (Database.step) -- without it, one run of about fifteen left the
# connection open and stuck ("another operation is in progress") until retries ran out.
@pytest.mark.parametrize(
    ("armed_at", "after"), [("start", 1), *(("write", i) for i in range(1, 5))]
)
async def test_a_fatal_out_of_turn_costs_a_connection(
    cluster: FakeCluster, postgres: Postgres, armed_at: str, after: int
) -> None:
    c = cluster
    c.create_topic("in", PARTS)
    await seed(c.bootstrap_servers, "in", N, PARTS)
    async with FatalOutOfTurn(postgres.port, after) as proxy:
        config = app_config(c, max_records_per_txn=100, retry_timeout_s=3.0)
        app = eosflow.EosApp(Rows(proxy.dsn(postgres)), config)
        if armed_at == "start":
            proxy.armed.set()
        async with app:
            await at_the_end(postgres, N)
            if armed_at == "write":
                proxy.armed.set()
                await seed(c.bootstrap_servers, "in", N, PARTS)
            await asyncio.wait_for(proxy.injected.wait(), 30)
            await at_the_end(postgres, 2 * N if armed_at == "write" else N)
            assert app.failure is None, app.failure
    exactly_once(await rows(postgres), "in", 2 * N if armed_at == "write" else N)


# A COMMIT that went through and whose answer was lost: the sink reads the positions
# back, finds the batch committed (RECOVERED), writes nothing twice -- and, the input
# idle after it, counts that as a success: the app lives past retry_timeout_s.
# Mutations caught: the read back left out -- the batch reported aborted though it
# committed (the next write's check still finds the positions moved and writes nothing
# twice); with the check's position comparison left out too -- the batch written twice
# (the comparison alone out: the read back covers it); a recovered batch left owed --
# the idle app stopped after retry_timeout_s (found by a review).
async def test_a_commit_whose_answer_was_lost_is_read_back(
    cluster: FakeCluster, postgres: Postgres
) -> None:
    c = cluster
    c.create_topic("in", PARTS)
    await seed(c.bootstrap_servers, "in", N, PARTS)
    async with CommitReplyLost(postgres.port) as proxy:
        dsn = proxy.dsn(postgres)
        config = app_config(c, max_records_per_txn=100, retry_timeout_s=3.0)
        app = eosflow.EosApp(Rows(dsn), config)
        async with app:
            await at_the_end(postgres, N)
            proxy.armed.set()
            await seed(c.bootstrap_servers, "in", PARTS, PARTS)  # the last batch: cut
            await asyncio.wait_for(proxy.cut.wait(), 30)
            await at_the_end(postgres, N + PARTS)
            await asyncio.sleep(config.retry_timeout_s + 2)  # idle, past the budget
            assert app.failure is None, app.failure
        assert app.stats.recovered == 1
    exactly_once(await rows(postgres), "in", N + PARTS)


# A COMMIT answered "statement completion unknown" (SQLSTATE 40003) though it went
# through: the sink reads the positions back, finds the batch committed (RECOVERED) and
# writes nothing twice. Mutation caught: the code mapped as a refusal (FatalError) --
# the app stopped on it.
async def test_a_commit_of_unknown_completion_is_read_back(
    cluster: FakeCluster, postgres: Postgres
) -> None:
    c = cluster
    c.create_topic("in", PARTS)
    await seed(c.bootstrap_servers, "in", N, PARTS)
    async with CommitOutcomeUnknown(postgres.port) as proxy:
        app = eosflow.EosApp(Rows(proxy.dsn(postgres)), app_config(c, max_records_per_txn=100))
        async with app:
            await at_the_end(postgres, N)
            proxy.armed.set()
            await seed(c.bootstrap_servers, "in", PARTS, PARTS)  # the last batch
            await asyncio.wait_for(proxy.injected.wait(), 30)
            await at_the_end(postgres, N + PARTS)
            await eventually(lambda: _recovered(app), what="the batch read back")
    exactly_once(await rows(postgres), "in", N + PARTS)


async def _recovered(app: eosflow.EosApp) -> bool:
    assert app.failure is None, app.failure
    return app.stats.recovered == 1


# Exhausted retries are an error: the database gone for good, the app stops once its
# failures outlast retry_timeout_s, naming PostgreSQL -- never a silent wait.
async def test_a_database_gone_for_good_stops_the_app(
    cluster: FakeCluster, postgres: Postgres
) -> None:
    c = cluster
    c.create_topic("in", PARTS)
    await seed(c.bootstrap_servers, "in", N, PARTS)
    app = eosflow.EosApp(Rows(postgres.dsn), app_config(c, retry_timeout_s=4.0))
    with pytest.raises(eosflow.FatalError, match="PostgreSQL"):
        async with app:
            await written(postgres, 1)
            postgres.kill()
            await seed(c.bootstrap_servers, "in", N, PARTS)  # more to write
            await eventually(lambda: _failed(app), timeout_s=30, what="the app stopped")


async def _failed(app: eosflow.EosApp) -> bool:
    return app.failure is not None
