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
from aiokafka import AIOKafkaProducer
from kit import eventually
from test_failures import seed_input_only
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


# A producer outside the group (no eosflow member) takes the id twice: the app takes it
# back the first time (no newer member shows), and the second refusal, within
# retry_timeout_s of that, is fatal -- two instances that cannot see each other in the
# group would otherwise take the id from each other for ever. Remove the bound in
# `reinit` and the app goes on: nothing is raised.
async def test_a_second_refusal_soon_after_taking_the_id_back_is_fatal(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await seed(c, n=20)
    proc = Gate("out", park_at=10)
    app = eosflow.EosApp(proc, cfg(c))

    async def usurp() -> None:
        outsider = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id="tx-1")
        await outsider.start()
        await outsider.stop()

    with pytest.raises(eosflow.ProducerFencedError, match=r"tx-1.*refused again"):
        async with app:
            await asyncio.wait_for(proc.parked.wait(), 20)
            await usurp()
            proc.gate.set()
            await until(app, lambda: app.stats.recovered >= 1 and all_done(app, c, 20), "back")
            await usurp()
            await seed_input_only(c, 5)  # work that meets the second refusal
            await until(app, lambda: False, "never", timeout_s=20)


def test_a_member_client_id_names_its_transactional_id_and_start() -> None:
    mine = eosflow.EosConfig(
        bootstrap_servers="x:9092", group_id="g", input_topics=("in",), transactional_id="b-c"
    )
    cid = ak.member_client_id(mine, 17)
    assert cid == "eosflow-b-c-17" and ak.member_started(mine, cid) == 17
    assert ak.member_started(mine, "pod-7-b-c-18") == 18  # another client id, same id
    assert ak.member_started(mine, "eosflow-c-17") is None  # another transactional id
    assert ak.member_started(mine, "eosflow-b-c-\u00b2") is None  # not a decimal stamp
    assert ak.member_started(mine, "eosflow") is None
    assert ak.member_id_parts("pod-7-b-c-18") == ("pod-7-b-c", 18)
    assert ak.member_id_parts("-18") is None and ak.member_id_parts("b-c") is None
