"""The paths for brokers without KIP-447 (no stable offset fetch, no TxnOffsetCommit v3)
and without KIP-360 (no InitProducerId v3), on a broker from the ladder, beside what a
newer broker does in the same situation.

Each test takes a broker ``age``: "2.4" needs a broker without KIP-447, "4.0" one with
it. On the test cluster that is its profile; on genuine Kafka it is the version the run
asked for (``EOSFLOW_TEST_BROKER=genuine:2.4.1`` for the old one), and the other age is
skipped with the reason. Nothing here injects a fault: what happens is what the broker
does, so the same test runs on genuine Kafka.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer
from kit import broker_has_kip447, create_topic, eventually, lso_reached_end, read_all
from test_end_to_end import config, seed
from test_mechanisms import Gate

import eosflow
from eosflow.testing._ladder import Broker, open_broker


@pytest.fixture(params=["2.4", "4.0"])
async def aged(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Broker, bool]]:
    """(broker, old): a broker of the age the parameter names."""
    want_old = request.param == "2.4"
    async with open_broker(profile=request.param) as b:
        old = not await broker_has_kip447(b.bootstrap_servers)
        if old != want_old:
            has = "lacks" if old else "has"
            pytest.skip(
                f"the {b.kind} broker {has} KIP-447; the {request.param} case needs one "
                f"that {'lacks' if want_old else 'has'} it (genuine: EOSFLOW_TEST_BROKER="
                f"genuine:{'2.4.1' if want_old else '4.4.0'})"
            )
        yield b, old


# Mechanism 4 (invariant 4) on any broker: without KIP-447 a commit holds the next
# rebalance back by post_commit_delay_s, so the new owner's plain OffsetFetch cannot
# read offsets older than the commit; with KIP-447 the stable fetch makes that
# unnecessary and the rebalance goes on at once. The rebalance is a second member
# joining right after a commit. Remove the hold (`hold` in `TransactSession.end` always
# False) and the old broker's case fails: the revocation follows within a heartbeat.
async def test_post_commit_delay_holds_a_rebalance_only_without_kip447(
    aged: tuple[Broker, bool],
) -> None:
    b, old = aged
    src, dst, group = b.unique("in"), b.unique("out"), b.unique("g")
    await create_topic(b.bootstrap_servers, src, 1)
    await create_topic(b.bootstrap_servers, dst, 1)
    proc = Gate(dst)
    delay_s = 3.0
    app = eosflow.EosApp(
        proc,
        # classic: the joiner is aiokafka's classic group consumer (a group mixing the
        # protocols is not modelled by the test cluster)
        config(
            b,
            src,
            group,
            post_commit_delay_s=delay_s,
            heartbeat_interval_s=0.2,
            group_protocol="classic",
        ),
    )
    joiner = AIOKafkaConsumer(
        src, bootstrap_servers=b.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    async with app:
        await seed(b.bootstrap_servers, src, 10, 1)

        async def all_committed() -> bool:
            assert app.failure is None, app.failure
            return app.stats.records == 10 and app.last_outcome is eosflow.Outcome.COMMITTED

        await eventually(all_committed, timeout_s=60, what="the first records committed")
        # Wait out any hold of that commit, then commit once more and join right after.
        await asyncio.sleep(delay_s)  # schedule: lets the first commit's hold expire
        before = app.stats.committed
        await seed(b.bootstrap_servers, src, 1, 1)

        async def one_more_commit() -> bool:
            return app.stats.committed > before

        await eventually(one_more_commit, timeout_s=30, what="the next commit")
        committed_at = time.monotonic()
        await joiner.start()
        try:

            async def revoked() -> bool:
                assert app.failure is None, app.failure
                return bool(proc.revoked_at)

            await eventually(revoked, timeout_s=60, what="the revocation")
        finally:
            await joiner.stop()
    waited = proc.revoked_at[0] - committed_at
    if old:
        assert waited >= delay_s - 0.1, f"revocation {waited:.2f} s after the commit"
    else:
        assert waited < delay_s - 1.0, f"revocation {waited:.2f} s after, on a KIP-447 broker"
    values = [v for _, _, v in await read_all(b.bootstrap_servers, dst)]
    expected = [f"v{i}".encode() for i in range(10)] + [b"v0"]  # seeded twice from 0
    assert sorted(values) == sorted(expected)  # type: ignore[type-var]


# Invariant 9 on any broker: the broker times out a transaction that stays open too long
# (the processor stalls), aborts it and bumps the producer epoch. With KIP-360 the app
# re-initialises with its last epoch and redoes the work: exactly once. Without it, the
# answer cannot be told apart from a fencing by a newer instance, so the app stops with
# ProducerFencedError and nothing of the timed-out transaction is committed. Remove the
# raise in `reinit`'s non-KIP-360 path (`_engine/_reinit.py`) and the old broker's case
# recovers instead.
async def test_a_transaction_the_broker_timed_out(aged: tuple[Broker, bool]) -> None:
    b, old = aged
    src, dst, group = b.unique("in"), b.unique("out"), b.unique("g")
    await create_topic(b.bootstrap_servers, src, 1)
    await create_topic(b.bootstrap_servers, dst, 1)
    proc = Gate(dst, park_at=5)
    # one transaction spans the whole 4 s interval (it must not end once caught up)
    cfg = config(
        b, src, group, commit_interval_s=4.0, min_transaction_s=4.0, transaction_timeout_s=5.0
    )
    app = eosflow.EosApp(proc, cfg)

    async def stall_past_the_transaction_timeout() -> None:
        await seed(b.bootstrap_servers, src, 5, 1)

        async def sent_and_open() -> bool:  # five outputs in the log, none committed
            assert app.failure is None, app.failure
            sent = await read_all(b.bootstrap_servers, dst, committed_only=False)
            return len(sent) == 5 and not await lso_reached_end(b.bootstrap_servers, dst)

        await eventually(sent_and_open, timeout_s=30, what="records 0-4 sent, uncommitted")
        await seed(b.bootstrap_servers, src, 1, 1)  # offset 5: the processor stalls on it
        await asyncio.wait_for(proc.parked.wait(), 30)

        async def aborted_by_the_broker() -> bool:
            return await lso_reached_end(b.bootstrap_servers, dst)

        await eventually(aborted_by_the_broker, timeout_s=30, what="the broker's abort")
        proc.gate.set()

    if old:
        # without KIP-360 the fence is final, and the line says what most likely caused
        # it, not "owned by a newer instance" (issue 51.10: none ran)
        said = rf"{cfg.transactional_id}' was fenced by the broker: the transaction most likely"
        with pytest.raises(eosflow.ProducerFencedError, match=said):
            async with app:
                await stall_past_the_transaction_timeout()

                async def stopped() -> bool:
                    return app.failure is not None

                await eventually(stopped, timeout_s=60, what="the app stopping")
        assert app.stats.committed == 0
        assert await read_all(b.bootstrap_servers, dst) == []
        return
    async with app:
        await stall_past_the_transaction_timeout()

        async def all_committed() -> bool:
            assert app.failure is None, app.failure
            return app.stats.records >= 6 and app.last_outcome is eosflow.Outcome.COMMITTED

        await eventually(all_committed, timeout_s=60, what="the work redone and committed")
        assert app.stats.recovered >= 1
    values = [v for _, _, v in await read_all(b.bootstrap_servers, dst)]
    expected = [f"v{i}".encode() for i in range(5)] + [b"v0"]  # seeded twice from 0
    assert sorted(values) == sorted(expected)  # type: ignore[type-var]
