"""The broker ladder: which Kafka a broker-facing test runs against.

1. A genuine cluster named by ``EOSFLOW_TEST_BOOTSTRAP=host:port``.
2. Else a Kafka container through testcontainers, when the package is installed and a
   Docker engine answers (``EOSFLOW_TEST_KAFKA_IMAGE``, default ``apache/kafka:4.0.0``).
3. Else eosflow's own ``FakeCluster`` in-process.

Tests see a ``Broker``: the bootstrap address, the cluster when it is the fake (for fault
injection), and the timing facts that differ between brokers (a genuine broker keeps its
defaults: 6 s minimum session timeout, 10 s transaction sweep). A test that needs the
fake's controls calls ``broker.require_fake(reason)``, which skips it elsewhere and says why.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ._cluster import ClusterSettings, FakeCluster
from ._groups import GroupSettings
from ._txn import TxnSettings

ENV_BOOTSTRAP = "EOSFLOW_TEST_BOOTSTRAP"
ENV_IMAGE = "EOSFLOW_TEST_KAFKA_IMAGE"


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
    """Test-cluster settings for fast tests: short minimum session timeout and a 100 ms
    transaction sweep; everything else at Kafka's defaults."""
    return ClusterSettings(
        profile=profile,
        groups=GroupSettings(min_session_timeout_s=0.3),
        txns=TxnSettings(sweep_interval_s=0.1),
    )


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
    settings = fake_settings(profile)
    async with FakeCluster(settings) as cluster:
        yield Broker(
            cluster.bootstrap_servers,
            "fake",
            cluster,
            settings.groups.min_session_timeout_s,
            settings.txns.sweep_interval_s,
        )


def _docker_kafka() -> contextlib.AbstractAsyncContextManager[str] | None:
    """A Kafka container when testcontainers and a Docker engine are both there."""
    try:
        import docker  # type: ignore[import-not-found,import-untyped,unused-ignore]
        from testcontainers.kafka import KafkaContainer  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    try:
        docker.from_env().ping()
    except Exception:
        return None

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
