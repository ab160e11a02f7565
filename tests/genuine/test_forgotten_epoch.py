"""Invariant 9 on genuine Kafka: an epoch the transaction coordinator forgot is not a
newer instance.

Kafka's coordinator accepts a KIP-360 re-initialisation with the epoch it bumped itself
when it timed a transaction out only while it remembers that epoch: the transaction
log keeps no field for it, so a coordinator that reloaded the log (its broker
restarted, or another broker took the ``__transaction_state`` partition over) refuses
it with PRODUCER_FENCED. Three genuine brokers met this in CI: a zombie woke as its
coordinator's broker was stopped (``test_chaos_brokers.py``), and the instance exited
"owned by a newer instance" with none running. Here on one broker, step by step.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import genuine, version
from fleet import seed
from kit import Gate, app_config, create_topic, eventually, log_seen, lso_reached_end, read_all

import eosflow
from eosflow.testing._genuine_jars import uses_zookeeper

pytestmark = pytest.mark.genuine


# The processor stalls past the transaction timeout; the broker aborts the transaction
# and bumps the epoch; the broker restarts (its coordinator reloads the log) before the
# app goes on. The app's epoch is refused, no newer member of its transactional id is
# in the group, so it takes the id afresh and redoes the work: every record once. Make
# `reinit` raise on every refusal (`_engine/_reinit.py`) and the app stops with
# ProducerFencedError, as it did before.
async def test_an_epoch_the_restarted_coordinator_forgot_is_recovered() -> None:
    v = version()
    if uses_zookeeper(v):
        pytest.skip(f"Kafka {v}: no KIP-360 (it arrived in 2.5)")
    async with genuine(v) as k:
        bs = k.bootstrap_servers
        src, dst, group = "fe-in", "fe-out", "fe-g"
        await create_topic(bs, src, 1)
        await create_topic(bs, dst, 1)
        proc = Gate(dst, park_at=5)
        cfg = app_config(
            k,
            group_id=group,
            input_topics=(src,),
            commit_interval_s=4.0,
            min_transaction_s=4.0,
            transaction_timeout_s=5.0,
            retry_timeout_s=120.0,
            group_protocol="classic",
        )
        app = eosflow.EosApp(proc, cfg)
        with log_seen("eosflow.session", "the broker refused our epoch") as refused:
            async with app:
                await _stall_until_the_broker_aborts(app, proc, bs, src, dst)
                assert await read_all(bs, dst) == [], "records 0-4 aborted, not committed"
                k.kill(1)
                await k.restart(1)  # the coordinator reloads the log: the bumped epoch is gone
                proc.gate.set()

                async def all_committed() -> bool:
                    assert app.failure is None, app.failure
                    done = app.last_outcome is eosflow.Outcome.COMMITTED
                    return app.stats.records >= 6 and done

                await eventually(all_committed, timeout_s=90, what="the work redone, committed")
                assert app.stats.recovered >= 1
            assert refused.is_set(), "the refusal was met and the id taken afresh"
        values = [val for _, _, val in await read_all(bs, dst)]
        expected = [f"v{i}".encode() for i in range(5)] + [b"v0"]  # seeded twice from 0
        assert sorted(values) == sorted(expected)  # type: ignore[type-var]


async def _stall_until_the_broker_aborts(
    app: eosflow.EosApp, proc: Gate, bs: str, src: str, dst: str
) -> None:
    """Records 0-4 sent in one open transaction, the processor stalled on record 5, until
    the broker timed that transaction out."""
    await seed(bs, src, 5)

    async def sent_and_open() -> bool:  # five outputs in the log, none committed
        assert app.failure is None, app.failure
        sent = await read_all(bs, dst, committed_only=False)
        return len(sent) == 5 and not await lso_reached_end(bs, dst)

    await eventually(sent_and_open, timeout_s=30, what="records 0-4 sent, uncommitted")
    await seed(bs, src, 1)  # offset 5: the processor stalls on it
    await asyncio.wait_for(proc.parked.wait(), 30)

    async def aborted_by_the_broker() -> bool:
        return await lso_reached_end(bs, dst)

    await eventually(aborted_by_the_broker, timeout_s=30, what="the broker's abort")
