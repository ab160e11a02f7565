"""A stop asked while the app is still starting ends the start: the processor's
``on_start`` and the session's start (joining the group, retrying unreachable brokers for
``retry_timeout_s``) are cancelled, nothing is consumed or committed, and ``on_stop``
still runs. Each test fails when ``EosApp._unless_stopped`` awaits its step to the end."""

from __future__ import annotations

import asyncio
import logging

import pytest
from kit import session_of
from test_mechanisms import Gate, cfg, seed

import eosflow
from eosflow._protocol import _codes as codes
from eosflow.testing import FakeCluster


class SlowStart(Gate):
    """A processor whose ``on_start`` never ends by itself (a Spark cold start, say)."""

    def __init__(self) -> None:
        super().__init__("out")
        self.starting = asyncio.Event()
        self.stopped = False

    async def on_start(self) -> None:
        self.starting.set()
        await asyncio.Event().wait()

    async def on_stop(self) -> None:
        self.stopped = True


# Without the race against stop(), the app sits in on_start for ever (the wait_for runs
# out), and once on_start returns it would join the group only to leave it.
async def test_stop_during_on_start_never_joins_the_group(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, n=10)
    joins = c.intercept("JoinGroup", times=None)  # passes requests through, counting them
    proc = SlowStart()
    app = eosflow.EosApp(proc, cfg(c))

    async def start_then_stop() -> None:
        async with app:
            await asyncio.wait_for(proc.starting.wait(), 10)

    await asyncio.wait_for(start_then_stop(), 10)
    assert joins.hits == 0 and proc.stopped
    assert app.stats.committed == 0 and c.committed("g") == {}


# The transaction coordinator does not answer InitProducerId (held, as a hung broker
# would): without the race, stop() waits as long as the start does.
async def test_stop_while_the_session_starts_is_prompt(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, n=10)
    init = c.intercept("InitProducerId", hold=True, times=None)
    joins = c.intercept("JoinGroup", times=None)
    app = eosflow.EosApp(Gate("out"), cfg(c))
    try:

        async def start_then_stop() -> None:
            async with app:
                await init.matched()

        await asyncio.wait_for(start_then_stop(), 10)
    finally:
        init.release()
    assert joins.hits == 0 and app.stats.committed == 0


# A stop that lands while newly assigned partitions are being set up (their committed
# offsets being fetched): aiokafka's close lets that set-up finish, on the consumer being
# closed. Whatever it ends with is not a failure of the app: here the fetch is refused
# after a delay. Without the guard in `_failed` the refusal is logged as an error and
# recorded -- and a start retried after closing its clients would fail its first poll
# with it. (Before `Positions.take` held the consumer it started with, the set-up met
# the closed session itself and failed with an AssertionError on every such stop.)
async def test_a_stop_while_partitions_are_set_up_is_not_a_failure(
    cluster: FakeCluster, caplog: pytest.LogCaptureFixture
) -> None:
    c = cluster
    await seed(c, n=10)
    # delayed, not held: Kafka answers a connection's requests in order, so the consumer's
    # LeaveGroup waits behind it
    fetch = c.intercept(  # eosflow's RequireStable fetch (aiokafka's own is v1)
        "OffsetFetch", version=9, delay_s=2.0, error=codes.GROUP_AUTHORIZATION_FAILED
    )
    app = eosflow.EosApp(Gate("out"), cfg(c))

    async def start_then_stop() -> None:
        async with app:
            await fetch.matched()

    await asyncio.wait_for(start_then_stop(), 20)
    assert session_of(app) is not None and session_of(app)._failure is None
    errors = [
        r for r in caplog.records if r.name.startswith("eosflow") and r.levelno >= logging.ERROR
    ]
    assert not errors, caplog.text
