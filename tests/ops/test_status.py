"""``eosflow status`` against the ladder's broker: each partition's committed offset, last
stable offset, lag and holder, while an app runs and after it left."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from kit import broker_has_kip848, create_topic, eventually
from test_metrics import Scripted, config, open_transaction, produce

import eosflow
from eosflow._ops._status import group_status
from eosflow._stages import repartition_topic
from eosflow.testing import FakeCluster
from eosflow.testing._ladder import Broker, fake_settings

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_status_shows_partitions_holders_and_stable_lag(
    eosflow_broker: Broker, protocol: str
) -> None:
    """Under both group protocols: a consumer-protocol group is described by
    ConsumerGroupDescribe (DescribeGroups answers it Dead, with no members)."""
    b = eosflow_broker
    if protocol == "consumer" and not await broker_has_kip848(b.bootstrap_servers):
        pytest.skip("the broker lacks the consumer group protocol (KIP-848)")
    src, dst, group = b.unique("in"), b.unique("out"), b.unique("g")
    await create_topic(b.bootstrap_servers, src, 2)
    await create_topic(b.bootstrap_servers, dst, 1)
    await produce(b.bootstrap_servers, src, [str(i).encode() for i in range(100)], 2)
    async with open_transaction(b, src, 20) as txn:
        cfg = config(b, src, group, client_id="status-test", group_protocol=protocol)
        app = eosflow.EosApp(Scripted(dst), cfg)
        async with app:

            async def committed() -> bool:
                assert app.failure is None, app.failure
                return app.stats.records >= 100 and not app.in_transaction

            await eventually(committed, timeout_s=60, what="100 records committed")

            async def held() -> bool:  # the commit is visible to OffsetFetch
                st = await group_status(b.bootstrap_servers, group)
                return all(p.committed == 50 for p in st.partitions)

            await eventually(held, timeout_s=30, what="offsets 50 and 50 committed")
            st = await group_status(b.bootstrap_servers, group)
            assert (st.state, st.members) == ("Stable", 1)
            assert [(p.partition, p.committed, p.last_stable, p.lag) for p in st.partitions] == [
                (0, 50, 50, 0),  # the open transaction's 20 records are not lag
                (1, 50, 50, 0),
            ]
            # the member's client id names its transactional id and start (_reinit)
            mine = f"status-test-{cfg.transactional_id}-"
            assert all(p.member and p.member.startswith(mine) for p in st.partitions)

            # committed, the 20 are processed: the commit marker after them is no lag
            await txn.commit_transaction()

            async def seventy() -> bool:
                st = await group_status(b.bootstrap_servers, group)
                return st.partitions[0].committed == 70

            await eventually(seventy, timeout_s=60, what="the 20 records committed")
            st = await group_status(b.bootstrap_servers, group)
            assert (st.partitions[0].last_stable, st.partitions[0].lag) == (71, 0)
        st = await group_status(b.bootstrap_servers, group)
        assert (st.state, st.members) == ("Empty", 0)
        assert [p.member for p in st.partitions] == [None, None]

        # the CLI in a thread: the test cluster is served by this event loop
        def cli(group_id: str) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "eosflow", "status"]
            argv += ["--bootstrap-servers", b.bootstrap_servers, "--group-id", group_id]
            return subprocess.run(argv, capture_output=True, text=True, timeout=60)

        out = await asyncio.to_thread(cli, group)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assignor = ", assignor uniform" if protocol == "consumer" else ""  # the broker's
        assert lines[0] == f"group {group}: Empty, 0 member(s){assignor}, total lag 0"
        heading = ["TOPIC", "PARTITION", "COMMITTED", "LAST-STABLE", "LAG", "MEMBER"]
        assert lines[1].split() == heading
        assert lines[2].split() == [src, "0", "70", "71", "0", "-"]
        unknown = await asyncio.to_thread(cli, b.unique("none"))
        assert unknown.returncode == 2
        assert unknown.stderr.count("\n") == 1 and "has no committed offsets" in unknown.stderr


# A Kafka 4.x cluster whose group.version is 0 still lists ConsumerGroupDescribe and
# answers it UNSUPPORTED_VERSION (genuine 4.4.0): status then describes the group the
# classic way. Mutation caught: only GROUP_ID_NOT_FOUND sent on to DescribeGroups (status
# failed naming UNSUPPORTED_VERSION).
async def test_status_on_a_cluster_with_the_consumer_protocol_off() -> None:
    settings = dataclasses.replace(fake_settings(), features={"group.version": 0})
    async with FakeCluster(settings) as c:
        c.create_topic("in", 1)
        c.create_topic("out", 1)
        cfg = eosflow.EosConfig(
            bootstrap_servers=c.bootstrap_servers,
            group_id="g",
            input_topics=("in",),
            transactional_id="tx",
            client_id="gv0",
        )
        app = eosflow.EosApp(Scripted("out"), cfg)
        async with app:

            async def described() -> bool:
                assert app.failure is None, app.failure
                try:
                    st = await group_status(c.bootstrap_servers, "g")
                except eosflow.ConfigError:  # not joined yet: "no members ... (state Dead)"
                    return False
                return st.members == 1

            await eventually(described, timeout_s=30, what="one member described")
            st = await group_status(c.bootstrap_servers, "g")
            assert st.state == "Stable" and st.partitions[0].member is not None


# Given the pipeline, status sums the lag per stage over the topics each stage reads: the
# source for the first, the first's repartition topic for the second (no app runs: the
# offsets are committed by hand). Caught: every stage given every topic's lag (both 95);
# the stages' topics taken from the wrong group (0 for the second).
async def test_status_gives_a_pipelines_lag_by_stage(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    src, group = b.unique("orders"), b.unique("g")
    regrouped = repartition_topic(group, "by-product")
    await create_topic(b.bootstrap_servers, src, 2)
    await create_topic(b.bootstrap_servers, regrouped, 1)
    await produce(b.bootstrap_servers, src, [str(i).encode() for i in range(100)], 2)
    await produce(b.bootstrap_servers, regrouped, [str(i).encode() for i in range(30)], 1)
    owner = AIOKafkaConsumer(
        bootstrap_servers=b.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    await owner.start()
    try:
        tps = {TopicPartition(src, 0): 10, TopicPartition(src, 1): 20}
        tps[TopicPartition(regrouped, 0)] = 5
        owner.assign(list(tps))
        await owner.commit(tps)
    finally:
        await owner.stop()

    def cli() -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "eosflow", "status", "slow_regroup:SlowProductCounts"]
        argv += ["--app-dir", str(ROOT / "tests" / "procs")]
        argv += ["--bootstrap-servers", b.bootstrap_servers, "--group-id", group]
        env = os.environ | {"EOSFLOW_APP_ORDERS": src, "PYTHONPATH": str(ROOT)}
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)

    out = await asyncio.to_thread(cli)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith("total lag 95")
    assert lines[1] == "lag by stage: by-product 70, count 25"
