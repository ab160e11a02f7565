"""The broker ladder: which Kafka a broker-facing test runs against.

1. A genuine cluster named by ``EOSFLOW_TEST_BOOTSTRAP=host:port``.
2. Else a Kafka container through testcontainers, when the package is installed and a
   Docker engine answers (``EOSFLOW_TEST_KAFKA_IMAGE``, default ``apache/kafka:4.0.0``).
3. Else genuine Kafka from the official jars (``GenuineKafka``), when
   ``EOSFLOW_TEST_BROKER=genuine[:version]`` selects it: one broker started on first use
   and shared by the whole test run (starting one per test is far too slow), stopped
   when pytest ends (and at exit). A broker that cannot start fails the tests asking
   for it, with its reason; it is started once, its failure remembered.
4. Else eosflow's own ``FakeCluster`` in-process.

Tests see a ``Broker``: the bootstrap address, the cluster when it is the fake (for fault
injection), the ``GenuineKafka`` when it is that (kill, restart...), and the timing facts
that differ between brokers (a broker we did not start keeps Kafka's defaults: 6 s
minimum session timeout, 10 s transaction sweep). A test that needs the fake's controls
calls ``broker.require_fake(reason)``, which skips it elsewhere and says why.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ._broker import ClusterSettings
from ._cluster import FakeCluster
from ._genuine import DEFAULT_VERSION, MIN_SESSION_TIMEOUT_MS, TXN_SWEEP_MS, GenuineKafka
from ._groups import GroupSettings
from ._txn import TxnSettings

ENV_BOOTSTRAP = "EOSFLOW_TEST_BOOTSTRAP"
ENV_IMAGE = "EOSFLOW_TEST_KAFKA_IMAGE"
ENV_BROKER = "EOSFLOW_TEST_BROKER"


class NotOnThisBroker(Exception):
    """Raised by ``require_fake`` off the test cluster; the pytest plugin turns it into a
    skip with the reason, so a skipped contract test always says why."""


@dataclass
class Broker:
    bootstrap_servers: str
    kind: str  # "genuine", "container" or "fake"
    cluster: FakeCluster | None
    min_session_timeout_s: float
    txn_sweep_interval_s: float
    kafka: GenuineKafka | None = None  # the brokers we started from the jars

    def require_fake(self, reason: str) -> FakeCluster:
        if self.cluster is None:
            raise NotOnThisBroker(f"needs the test cluster ({reason}); broker is {self.kind}")
        return self.cluster

    @staticmethod
    def unique(prefix: str) -> str:
        """A topic/group/transactional id no other test run uses (genuine brokers keep
        state between runs)."""
        return f"{prefix}-{uuid.uuid4().hex[:10]}"


def fake_settings(profile: str = "4.0") -> ClusterSettings:
    """Test-cluster settings for fast tests: short minimum session timeout, the consumer
    protocol's heartbeat at 250 ms and session at 6 s (as the genuine launcher sets them)
    and a 100 ms transaction sweep; everything else at Kafka's defaults."""
    return ClusterSettings(
        profile=profile,
        groups=GroupSettings(
            min_session_timeout_s=0.3,
            consumer_heartbeat_interval_s=0.25,
            consumer_session_timeout_s=6.0,
        ),
        txns=TxnSettings(sweep_interval_s=0.1),
    )


def genuine_version() -> str | None:
    """The Kafka version ``EOSFLOW_TEST_BROKER=genuine[:version]`` asks for, or None."""
    value = os.environ.get(ENV_BROKER, "").strip()
    if not value:
        return None
    kind, _, version = value.partition(":")
    if kind != "genuine":
        raise ValueError(f"{ENV_BROKER}={value!r}: expected 'genuine' or 'genuine:<version>'")
    return version or DEFAULT_VERSION


@contextlib.asynccontextmanager
async def open_broker(profile: str = "4.0") -> AsyncIterator[Broker]:
    """Yield a broker from the ladder. ``profile`` applies only to the test cluster."""
    bootstrap = os.environ.get(ENV_BOOTSTRAP)
    if bootstrap:
        yield Broker(bootstrap, "genuine", None, 6.0, 10.0)
        return
    container = _docker_kafka()
    if container is not None:
        async with container as addr:
            yield Broker(addr, "container", None, 6.0, 10.0)
        return
    version = genuine_version()
    if version is not None:
        kafka = await shared_genuine(version)
        yield Broker(
            kafka.bootstrap_servers,
            "genuine",
            None,
            MIN_SESSION_TIMEOUT_MS / 1000,
            TXN_SWEEP_MS / 1000,
            kafka,
        )
        return
    settings = fake_settings(profile)
    async with FakeCluster(settings) as cluster:
        yield Broker(
            cluster.bootstrap_servers,
            "fake",
            cluster,
            settings.groups.min_session_timeout_s,
            settings.txns.sweep_interval_s,
        )


_shared: dict[str, GenuineKafka] = {}
_shared_failures: dict[str, str] = {}


async def shared_genuine(version: str) -> GenuineKafka:
    """The one broker of ``version`` this process shares, started on first use. A broker
    that failed to start is not tried again: the same error is raised at once."""
    if version in _shared_failures:
        raise RuntimeError(_shared_failures[version])
    kafka = _shared.get(version)
    if kafka is not None:
        dead = [i for i in kafka.node_ids if kafka.pid(i) is None]
        if dead:
            raise RuntimeError(
                f"the shared Kafka {version} broker {dead} is no longer running:\n"
                f"{kafka.log_tail(40)}"
            )
        return kafka
    kafka = GenuineKafka(version)
    try:
        await kafka.start()
    except Exception as exc:
        _shared_failures[version] = f"genuine Kafka {version} did not start: {exc}"
        raise
    _shared[version] = kafka
    return kafka


@atexit.register
def stop_shared() -> None:
    """Stop the shared genuine brokers (the pytest plugin calls it when the run ends)."""
    while _shared:
        _, kafka = _shared.popitem()
        kafka.stop_sync()


@functools.cache
def docker_status() -> str | None:
    """None when testcontainers is installed and a Docker engine answers, else why not."""
    try:
        import docker  # type: ignore[import-not-found,import-untyped,unused-ignore]
        import testcontainers  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError as exc:
        return f"testcontainers is not installed ({exc.name} missing)"
    try:
        docker.from_env(timeout=5).ping()
    except Exception as exc:
        return f"no Docker engine answers ({type(exc).__name__}: {str(exc)[:60]})"
    return None


def describe() -> list[str]:
    """Which rung tests use and why the ones above it were not (for pytest's header)."""
    if os.environ.get(ENV_BOOTSTRAP):
        return [f"eosflow broker: {ENV_BOOTSTRAP}={os.environ[ENV_BOOTSTRAP]} (rung 1)"]
    docker = docker_status()
    if docker is None:
        image = os.environ.get(ENV_IMAGE, "apache/kafka:4.0.0")
        return [f"eosflow broker: testcontainers {image} (rung 2; {ENV_BOOTSTRAP} not set)"]
    lines = [
        f"eosflow broker ladder: {ENV_BOOTSTRAP} not set; testcontainers not exercised: {docker}"
    ]
    try:
        version = genuine_version()
    except ValueError as exc:
        return [*lines, f"eosflow broker: {exc}"]
    if version is not None:
        return [*lines, f"eosflow broker: genuine Kafka {version} from the jars (rung 3, shared)"]
    lines.append(
        f"eosflow broker: the test cluster (rung 4; {ENV_BROKER}=genuine[:version] not set)"
    )
    return lines


def _docker_kafka() -> contextlib.AbstractAsyncContextManager[str] | None:
    """A Kafka container when testcontainers and a Docker engine are both there."""
    if docker_status() is not None:
        return None
    try:
        from testcontainers.community.kafka import (  # type: ignore[import-not-found,unused-ignore]
            KafkaContainer,
        )
    except ImportError:  # older testcontainers
        from testcontainers.kafka import KafkaContainer  # type: ignore[import-not-found,unused-ignore,no-redef]

    @contextlib.asynccontextmanager
    async def run() -> AsyncIterator[str]:
        import asyncio

        image = os.environ.get(ENV_IMAGE, "apache/kafka:4.0.0")
        kafka = KafkaContainer(image)
        await asyncio.to_thread(kafka.start)
        try:
            yield str(kafka.get_bootstrap_server())
        finally:
            await asyncio.to_thread(kafka.stop)

    return run()
