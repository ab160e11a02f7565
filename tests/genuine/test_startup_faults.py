"""Issue 50 on genuine Kafka: instances that start while their group coordinator's broker
is down get going once it is back, under both group protocols, exactly once.

Three KRaft brokers (RF 3, ``min.insync.replicas=2``). For each group protocol the
cluster has, and each way a broker goes away during a deploy -- SIGKILLed then
restarted on its data, or SIGSTOPped (connections open, nothing answered) then
SIGCONTed -- the broker leading the group's ``__consumer_offsets`` partition (its group
coordinator; found before the group exists, by its key) goes away, an app starts against
the cluster, and the broker comes back 8 s later (past the controller's 4 s fencing of a
silent broker, so the coordinator moves, and past a start's first attempts). The input's
partitions have nothing committed: each is positioned by where its log starts. The app
must then copy every record exactly once within the test's bound, without stopping.

On the test cluster each single request's faults are pinned (``tests/runtime/
test_liveness.py``, the fault matrix's ``@start`` cases); here the faults are whole
brokers, as Kafka gives them.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import genuine, version
from fleet import committed_total, seed
from kit import app_config, broker_has_kip848, create_topic

import eosflow
from eosflow.testing import check_exactly_once
from eosflow.testing._genuine import GenuineKafka
from eosflow.testing._genuine_jars import uses_zookeeper
from eosflow.testing._ladder import Broker

pytestmark = pytest.mark.genuine

RECORDS, PARTITIONS, BROKERS = 2_000, 4, 3
AWAY_S = 8.0
SESSION_S = 8.0


class Copy(eosflow.Processor):
    def __init__(self, out: str) -> None:
        self.out = out

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        return eosflow.Output(self.out, record.value, key=record.key)


async def test_apps_started_while_the_group_coordinator_is_away_copy_exactly_once() -> None:
    v = version()
    if uses_zookeeper(v):
        pytest.skip(f"Kafka {v}: the three-broker launcher runs KRaft")
    async with genuine(v, brokers=BROKERS) as k:
        protocols = ["classic"]
        if await broker_has_kip848(k.bootstrap_servers):
            protocols.append("consumer")
        seen = []
        for protocol in protocols:
            for fault in ("killed", "stopped"):
                took = await _start_while_away(k, protocol, fault)
                seen.append(f"{protocol}/{fault}: {took:.1f} s")
        print("copied exactly once:", "; ".join(seen))


async def _start_while_away(k: GenuineKafka, protocol: str, fault: str) -> float:
    bs = k.bootstrap_servers
    src, dst = Broker.unique("sf-in"), Broker.unique("sf-out")
    group = Broker.unique(f"sf-{protocol}-{fault}")
    await create_topic(bs, src, PARTITIONS, replication=BROKERS)
    await create_topic(bs, dst, PARTITIONS, replication=BROKERS)
    await seed(bs, src, RECORDS)
    coordinator = await k.coordinator(group, "group")
    config = app_config(
        k,
        group_id=group,
        input_topics=(src,),
        transactional_id=Broker.unique("sf-tx"),
        group_protocol=protocol,
        session_timeout_s=SESSION_S,
        heartbeat_interval_s=SESSION_S / 10,
        transaction_timeout_s=SESSION_S * 0.8,
        retry_timeout_s=120.0,
    )
    began = time.monotonic()
    if fault == "killed":
        k.kill(coordinator)
    else:
        k.stop_node(coordinator)
    app = eosflow.EosApp(Copy(dst), config)
    try:
        async with app:
            await asyncio.sleep(AWAY_S)
            if fault == "killed":
                await k.restart(coordinator)
            else:
                k.cont(coordinator)
            while (done := await committed_total(bs, src, PARTITIONS, group)) < RECORDS:
                assert app.failure is None, f"{protocol}/{fault}: {app.failure}"
                assert time.monotonic() - began < 150, (
                    f"{protocol}/{fault}: {done} of {RECORDS} committed in 150 s"
                )
                await asyncio.sleep(0.5)
    finally:
        k.cont(coordinator)  # a failed run leaves no broker stopped for the next
    report = await check_exactly_once(bs, src, dst, match="key", group_id=group)
    assert report.ok, f"{protocol}/{fault}: {report.summary()}"
    assert report.inputs == RECORDS and report.outputs == RECORDS
    return time.monotonic() - began
