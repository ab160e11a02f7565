"""Invariant 9, fencing: a newer instance of our transactional id is fatal; an epoch the
coordinator only forgot is not.

The broker refuses a KIP-360 re-initialisation (PRODUCER_FENCED) in two cases: a newer
instance took the transactional id, or the coordinator timed our transaction out and
then moved to another broker, which no longer knows the epoch it bumped (Kafka keeps
it in memory only). The group tells them apart: each member's client id names its
transactional id and start (``eosflow/_engine/_reinit.py``).
"""

from __future__ import annotations

import asyncio

import pytest
from kit import eventually
from test_mechanisms import Gate, all_done, assert_exactly_once, cfg, seed, until

import eosflow
from eosflow import _aiokafka as ak
from eosflow._security import KafkaSecurity
from eosflow.testing import FakeCluster


async def members_of(c: FakeCluster, txn_id: str) -> list[str]:
    view = await ak.describe_group(c.bootstrap_servers, KafkaSecurity(), "g")
    return [m.client_id for m in view.members if f"-{txn_id}-" in m.client_id]


# A newer instance -- an app with the same transactional id, in the group -- fences this
# one: its open transaction is aborted, its re-initialisation refused, and the group
# shows the member that started after it: fatal, while the newer one goes on. Make
# `newer_member` answer None and the two fence each other in turn: nothing is raised.
async def test_a_newer_instance_is_fatal(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c, n=20)
    proc = Gate("out", park_at=10)
    app = eosflow.EosApp(proc, cfg(c))
    newer = eosflow.EosApp(Gate("out"), cfg(c))
    with pytest.raises(eosflow.ProducerFencedError, match=r"tx-1.*newer member"):
        async with app:
            await asyncio.wait_for(proc.parked.wait(), 20)
            async with newer:

                async def both_members() -> bool:
                    return len(await members_of(c, "tx-1")) == 2

                await eventually(both_members, timeout_s=20, what="the newer instance's join")
                proc.gate.set()
                await until(app, lambda: False, "never", timeout_s=20)
    assert newer.failure is None


# The coordinator timed the transaction out (the processor stalled) and moved to another
# broker before the app re-initialised: the broker refuses the app's last epoch, and no
# newer member of its transactional id is in the group, so the app takes the id afresh
# and redoes the work: exactly once. On genuine Kafka: tests/genuine/test_chaos_brokers.py
# (a zombie woke as its coordinator's broker was stopped). Make `reinit` raise on every
# refusal and the app stops with ProducerFencedError.
async def test_an_epoch_the_moved_coordinator_forgot_is_recovered(cluster: FakeCluster) -> None:
    c = cluster
    await seed(c)
    proc = Gate("out", park_at=100)
    app = eosflow.EosApp(proc, cfg(c, transaction_timeout_s=1.0))
    async with app:
        await asyncio.wait_for(proc.parked.wait(), 20)
        before = c.txns.txns["tx-1"].epoch

        async def timed_out() -> bool:
            return c.txns.txns["tx-1"].epoch > before

        await eventually(timed_out, timeout_s=20, what="the coordinator's timeout abort")
        c.move_txn_coordinators()
        proc.gate.set()
        await until(app, lambda: all_done(app, c), "all committed")
        assert app.stats.recovered >= 1
    await assert_exactly_once(c)
