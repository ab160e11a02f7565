"""GenuineKafka: Apache Kafka's own brokers from the jars (1 broker, 3 brokers surviving a
SIGKILL, the pre-KIP-447 2.4 broker), the shared ladder rung, and
``python -m eosflow.testing --genuine``."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from conftest import genuine, version
from kit import Upper, eventually, read_all, session_of

sys.path.insert(0, str(Path(__file__).parents[1] / "contract"))
from test_transactions_v2_protocol import served_by_version

import eosflow
from eosflow import _aiokafka
from eosflow._engine._protocols import Protocols
from eosflow.testing import _ladder
from eosflow.testing._genuine import MIN_SESSION_TIMEOUT_MS, OLD_VERSION, GenuineKafka

pytestmark = pytest.mark.genuine


async def _transactions(bootstrap: str, topic: str, txn_id: str, tag: str) -> None:
    """One committed and one aborted transaction of two records each."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    await p.start()
    try:
        async with p.transaction():
            await p.send(topic, f"{tag}-c0".encode(), partition=0)
            await p.send(topic, f"{tag}-c1".encode(), partition=0)
        await p.begin_transaction()
        await p.send(topic, f"{tag}-a0".encode(), partition=0)
        await p.send(topic, f"{tag}-a1".encode(), partition=0)
        await p.abort_transaction()
    finally:
        await p.stop()


async def _values(bootstrap: str, topic: str, committed_only: bool = True) -> list[bytes | None]:
    return [v for _p, _o, v in await read_all(bootstrap, topic, committed_only=committed_only)]


def _state(pid: int | None) -> str | None:
    """The process's state letter from /proc (R, S, T...), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (FileNotFoundError, TypeError):
        return None


def _exists(path: Path) -> bool:
    return path.exists()


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


async def _topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    """The value the broker applies to ``topic`` for config ``name`` (DescribeConfigs);
    None while the broker asked does not know the topic yet."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (resp,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    ((error, _msg, _type, _name, entries),) = resp.resources
    return None if error else next(str(e[1]) for e in entries if e[0] == name)


async def _create(bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, rf)])
    finally:
        await admin.close()


async def test_one_broker_produce_consume_and_a_transaction_round_trip() -> None:
    async with genuine(version()) as k:
        assert k.node_ids == [1] and k.pid(1) is not None
        bs = k.bootstrap_servers
        p = AIOKafkaProducer(bootstrap_servers=bs, acks="all")
        await p.start()
        try:
            await p.send_and_wait("plain", b"hello", key=b"k")
        finally:
            await p.stop()
        c = AIOKafkaConsumer("plain", bootstrap_servers=bs, auto_offset_reset="earliest")
        await c.start()
        try:
            got = await c.getone()
        finally:
            await c.stop()
        assert (got.key, got.value) == (b"k", b"hello")

        await _create(bs, "txn", 1, 1)
        await _transactions(bs, "txn", "launcher-tx", "t")
        assert await _values(bs, "txn") == [b"t-c0", b"t-c1"]
        assert await _values(bs, "txn", committed_only=False) == [
            b"t-c0", b"t-c1", b"t-a0", b"t-a1",
        ]  # fmt: skip
        assert await k.coordinator("launcher-tx", "transaction") == 1
        assert "Kafka" in k.log_tail(200) and k.log_path.exists()
        assert "group.min.session.timeout.ms = 500" in k.log_path.read_text()
        pid, home = k.pid(1), k.log_path.parent.parent
    assert pid is not None and _state(pid) is None
    assert _state(pid) is None and not _exists(home)


async def test_three_brokers_survive_a_sigkill_with_min_insync_two() -> None:
    async with genuine(version(), brokers=3) as k:
        bs = k.bootstrap_servers
        assert k.node_ids == [1, 2, 3]
        await _create(bs, "rf3", 1, 3)

        async def min_isr_is_two() -> bool:
            return await _topic_config(bs, "rf3", "min.insync.replicas") == "2"

        await eventually(min_isr_is_two, 30, "min.insync.replicas=2 on the new topic")
        await _transactions(bs, "rf3", "rf3-tx", "before")
        victim = await k.coordinator("rf3-tx", "transaction")
        k.kill(victim)  # the broker leading our transaction coordinator
        assert k.pid(victim) is None
        survivor = next(i for i in k.node_ids if i != victim)
        await _transactions(bs, "rf3", "rf3-tx", "after")  # acks=all with 2 of 3 in sync
        # the coordinator moved once the controller fenced the dead broker
        assert await k.coordinator("rf3-tx", "transaction") != victim
        assert await _values(bs, "rf3") == [b"before-c0", b"before-c1", b"after-c0", b"after-c1"]

        k.stop_node(survivor)  # SIGSTOP / SIGCONT
        assert _state(k.pid(survivor)) == "T"
        k.cont(survivor)
        await k.restart(victim)
        assert k.pid(victim) is not None

        async def all_in_sync() -> bool:
            admin = AIOKafkaAdminClient(bootstrap_servers=bs)
            await admin.start()
            try:
                (topic,) = await admin.describe_topics(["rf3"])
            finally:
                await admin.close()
            return sorted(topic["partitions"][0]["isr"]) == [1, 2, 3]

        await eventually(all_in_sync, 60, "the restarted broker back in sync")


async def test_old_broker_lacks_kip447_and_kip360() -> None:
    async with genuine(OLD_VERSION) as k:
        versions = await k.api_versions(1)
        assert versions[28] < 3  # TxnOffsetCommit v3 is KIP-447's
        assert versions[9] < 7  # OffsetFetch v7 (RequireStable)
        assert versions[22] < 3  # InitProducerId v3 (KIP-360)
        p = AIOKafkaProducer(bootstrap_servers=k.bootstrap_servers, transactional_id="old-tx")
        await p.start()
        try:
            caps = await _aiokafka.capabilities(p)
        finally:
            await p.stop()
        assert not caps.kip447 and not caps.kip360
        assert not caps.kip848 and not caps.txn_v2 and caps.features == ()
        assert await _chosen(k) == Protocols("classic", txn_v2=False)
        await _create(k.bootstrap_servers, "old", 1, 1)
        await _transactions(k.bootstrap_servers, "old", "old-tx", "o")
        assert await _values(k.bootstrap_servers, "old") == [b"o-c0", b"o-c1"]


async def test_the_ladder_shares_one_genuine_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_ladder.ENV_BOOTSTRAP, raising=False)
    monkeypatch.setenv(_ladder.ENV_BROKER, f"genuine:{version()}")
    if _ladder.docker_status() is None:
        pytest.skip("a Docker engine answers: the ladder takes the testcontainers rung")
    async with _ladder.open_broker() as first:
        pass
    async with _ladder.open_broker() as second:
        assert second.kafka is first.kafka is not None
    assert first.kind == "genuine" and first.cluster is None
    assert first.min_session_timeout_s == MIN_SESSION_TIMEOUT_MS / 1000
    assert first.kafka.pid(1) is not None  # stopped when the test run ends
    assert any("genuine Kafka" in line for line in _ladder.describe())


async def test_module_main_prints_bootstrap_and_stops_on_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "eosflow.testing", "--genuine", "--version", version(),
        "--topic", "cli:2",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 240)).decode()
        assert line.startswith("BOOTSTRAP 127.0.0.1:"), line
        bootstrap = line.split()[1]
        children = _children(proc.pid)
        assert len(children) == 1  # the one broker JVM
        p = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await p.start()
        try:
            await p.send_and_wait("cli", b"x", partition=1)
            assert len(await p.partitions_for("cli")) == 2
        finally:
            await p.stop()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        assert _state(children[0]) is None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _chosen(k: GenuineKafka, **asked: str) -> Protocols:
    """What a session with ``asked`` (the defaults: "auto") chose on ``k``'s cluster."""
    await _create(k.bootstrap_servers, "chosen-in", 1, 1)
    config = eosflow.EosConfig(
        bootstrap_servers=k.bootstrap_servers,
        group_id="chosen",
        input_topics=("chosen-in",),
        transactional_id="chosen-tx",
        **asked,  # type: ignore[arg-type]
    )
    async with eosflow.EosApp(Upper("chosen-out"), config) as app:

        async def decided() -> bool:
            s = session_of(app)
            return app.failure is not None or (s is not None and s.protocols is not None)

        await eventually(decided, timeout_s=60, what="the session's protocols")
        if app.failure is not None:
            raise app.failure
        assert session_of(app) is not None and session_of(app).protocols is not None
        return session_of(app).protocols


@contextlib.asynccontextmanager
async def _client(bootstrap_servers: str) -> AsyncIterator[Any]:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap_servers)
    await p.start()
    try:
        yield p.client
    finally:
        await p.stop()


async def _caps(bootstrap_servers: str) -> _aiokafka.Capabilities:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap_servers)
    await p.start()
    try:
        return await _aiokafka.capabilities(p)
    finally:
        await p.stop()


@pytest.mark.parametrize(
    ("features", "kip848", "txn_v2"),
    [
        (None, True, True),  # a fresh 4.x cluster finalizes both
        ({"group.version": 0, "transaction.version": 0}, False, False),
        ({"transaction.version": 1}, True, False),
    ],
)
async def test_kafka_4_protocols_are_detected_from_finalized_features(
    features: dict[str, int] | None, kip848: bool, txn_v2: bool
) -> None:
    """KIP-848 and transactions v2 are read from the features an ApiVersions v3 answer
    finalizes, not from the API list: a 4.4 broker formatted with group.version 0 still
    advertises ConsumerGroupHeartbeat v1, and one with transaction.version 0 EndTxn v5
    (both seen here). The 2.4.1 broker, with neither, is test_old_broker_lacks_kip447..."""
    if version().split(".")[0] < "4":
        pytest.skip(f"the features are Kafka 4's; this run's broker is {version()}")
    async with genuine(version(), features=features) as k:
        caps = await _caps(k.bootstrap_servers)
        assert (caps.kip848, caps.txn_v2) == (kip848, txn_v2), caps.describe()
        assert caps.kip447 and caps.kip360
        assert caps.consumer_group_heartbeat >= 1 and caps.end_txn >= 5, caps.describe()
        # brokers serve v2 requests from transaction.version 1 on (1 tells clients v1)
        level = (features or {}).get("transaction.version", 2)
        async with _client(k.bootstrap_servers) as client:
            await _create(k.bootstrap_servers, "served", 1, 1)
            await served_by_version(client, k.bootstrap_servers, "served", level)
        # the session's defaults follow the cluster (docs/design.md, invariant 46)
        group = "consumer" if kip848 else "classic"
        assert await _chosen(k) == Protocols(group, txn_v2)
        # an explicit ask for what the cluster lacks is one line naming what it lacks
        for asked, lacked in [("group_protocol", kip848), ("transactions_v2", txn_v2)]:
            if lacked:
                continue
            value = "consumer" if asked == "group_protocol" else "on"
            with pytest.raises(eosflow.FatalError, match=f"{asked} '{value}' needs"):
                await _chosen(k, **{asked: value})
