"""``Broker``: what the test cluster's one broker knows -- its topics and their logs, its
groups, its transactions, the versions and features it speaks -- apart from how it is
served (``FakeCluster``, ``_cluster``). Every API handler (``_handlers_*``) works on a
``Broker``; the cluster serves them on its listener. Kept apart so that the handlers,
registered in ``_api``, need not know the cluster that calls them: no import runs back.

The broker is node 0 and coordinator of every group and transactional id.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from .._protocol import codes
from . import _codec
from ._groups import GroupCoordinator, GroupSettings
from ._groups_consumer import ConsumerGroups
from ._log import PartitionLog
from ._sasl import ClusterSecurity
from ._txn import TxnCoordinator, TxnSettings

# Version profiles: (floors, caps) by API key. "2.4" predates KIP-447; "2.5" has it (and
# KIP-360 InitProducerId v3) but not KIP-588; "4.0" has the KIP-896 floors, as genuine
# 4.0.0-4.4.0 advertise them (CreateTopics v2, DeleteTopics v1, DescribeConfigs v1 ...).
# The highest versions are the cluster's own (what _codec decodes), lower than Kafka's on
# purpose; within them the ranges are Kafka's (checked against 2.4.1 and 4.4.0 by
# tests/contract/test_broker_answers.py). A cap below the floor leaves the API out:
# ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) are Kafka 4's,
# DescribeTransactions (65) Kafka 3.0's.
PROFILES: dict[str, tuple[dict[int, int], dict[int, int]]] = {
    "2.4": (
        {},
        {0: 8, 28: 2, 9: 6, 22: 2, 26: 1, 25: 1, 24: 1, 12: 4, 3: 9, 21: 1, 65: -1, 68: -1}
        | {69: -1},
    ),
    "2.5": (
        {},
        {0: 8, 28: 3, 9: 7, 22: 3, 26: 1, 25: 1, 24: 1, 3: 9, 21: 1, 65: -1, 68: -1, 69: -1},
    ),
    "4.0": ({0: 3, 1: 4, 2: 1, 8: 2, 9: 1, 19: 2, 20: 1, 32: 1}, {}),
}
# Floors a profile advertises lower than it accepts: Kafka 4.x advertises Produce from v0
# (for old librdkafka clients, KAFKA-18659) but closes the connection of a v0-v2 request.
ADVERTISED_FLOORS: dict[str, dict[int, int]] = {"4.0": {0: 0}}
# The features each profile finalizes (ApiVersions v3+, KIP-584): "4.0" the consumer group
# protocol (group.version 1, ``_groups_consumer``) and transactions v2 (transaction.version
# 2, ``_txn``), as genuine 4.4.0 finalizes them by default.
PROFILE_FEATURES: dict[str, dict[str, int]] = {
    "4.0": {"group.version": 1, "transaction.version": 2}
}


RETENTION_MS = 604_800_000  # a topic's retention.ms unless set: Kafka's default, 7 days


@dataclass(frozen=True)
class ClusterSettings:
    """How the fake broker behaves. Defaults mirror Kafka's broker defaults where one
    exists (session timeout bounds, 10 s transaction sweep, topic auto-creation on)."""

    profile: str = "4.0"
    auto_create_topics: bool = True
    default_partitions: int = 1
    groups: GroupSettings = field(default_factory=GroupSettings)
    txns: TxnSettings = field(default_factory=TxnSettings)
    session_check_interval_s: float = 0.05
    # how often logs are checked against their topic's ``retention.ms`` (7 days unless
    # set at CreateTopics): Kafka checks every 5 minutes (the first 30 s after start);
    # here every second, so a test whose records are stamped long ago (1970's ms 0) fails
    # at once here as it would at some point against a genuine broker
    retention_check_interval_s: float = 1.0
    # added before every request is handled: a stand-in for the network round trip (and
    # replication) of a real cluster; requests on one connection are served one at a
    # time, as Kafka does. For benchmarks; 0 in tests.
    latency_s: float = 0.0
    # The first use of a coordinator: genuine Kafka answers FindCoordinator with
    # COORDINATOR_NOT_AVAILABLE while it creates and loads __consumer_offsets (group) or
    # __transaction_state (transaction) -- measured 40-190 ms on 4.0.0/4.4.0, up to 315 ms
    # on 2.4.1 -- so the window starts at the first FindCoordinator of each kind. From 4.0
    # (KRaft) the first InitProducerId also answers COORDINATOR_LOAD_IN_PROGRESS while the
    # broker fetches a block of producer ids from the controller (40-120 ms measured).
    # Clients' retry paths run on every fresh cluster; 0 turns a window off.
    coordinator_load_s: float = 0.1
    producer_ids_load_s: float = 0.05
    # TLS and SASL on the listener (``_sasl``); None: PLAINTEXT
    security: ClusterSecurity | None = None
    # the finalized features (name -> level); None: the profile's (``PROFILE_FEATURES``).
    # {"group.version": 0} turns the consumer group protocol off, as on genuine Kafka 4.x.
    features: dict[str, int] | None = None

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r}; known: {sorted(PROFILES)}")


_PID_EPOCH = struct.Struct(">qh")


class Broker:
    """The broker's state and the answers that depend on it alone. ``apis``: the API keys
    it has a handler for (``_handlers.HANDLERS``), which its versions are taken from."""

    node_id = 0

    def __init__(
        self,
        settings: ClusterSettings,
        apis: Iterable[int],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.settings = settings
        self.host = host
        self.port = port
        self.cluster_id = uuid.uuid4().hex[:22]
        self.auto_create_topics = self.settings.auto_create_topics
        self.default_partitions = self.settings.default_partitions
        self.topics: dict[str, list[PartitionLog]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}  # a new id each time a name is created
        self.topic_configs: dict[str, dict[str, str]] = {}  # set by CreateTopics
        self.groups = GroupCoordinator(self.settings.groups)
        self.consumer_groups = ConsumerGroups(
            self.groups,
            lambda: {name: len(parts) for name, parts in self.topics.items()},
            self.settings.groups.consumer_session_timeout_s,
            self.settings.groups.consumer_heartbeat_interval_s,
        )
        self.txns = TxnCoordinator(self.settings.txns, self.groups, self.log)
        self.txns.v2_served = lambda: self.features.get("transaction.version", 0) >= 1
        self._apis = sorted(apis)  # the APIs a handler serves
        self._floors, self._caps = PROFILES[self.settings.profile]
        self._first_use: dict[str, float] = {}

    # --- topics -----------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1) -> None:
        if partitions < 1:
            raise ValueError("a topic needs at least one partition")
        if name not in self.topics:
            self.topics[name] = [PartitionLog() for _ in range(partitions)]
            self.topic_ids[name] = uuid.uuid4()

    def expire_logs(self, now_ms: int) -> list[tuple[str, int, int]]:
        """Apply each topic's ``retention.ms`` (Kafka's default 7 days unless set at
        CreateTopics; -1 keeps everything) at ``now_ms``: (topic, partition, log start)
        of every log deleted whole (``PartitionLog.expire``)."""
        deleted = []
        for name, parts in self.topics.items():
            retention_ms = int(self.topic_configs.get(name, {}).get("retention.ms", RETENTION_MS))
            if retention_ms < 0:
                continue
            for p, plog in enumerate(parts):
                if plog.expire(now_ms - retention_ms):
                    deleted.append((name, p, plog.log_start_offset))
        return deleted

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic that has ``topic_id`` now (None: deleted or never made)."""
        return next((n for n, i in self.topic_ids.items() if i == topic_id), None)

    def log(self, tp: tuple[str, int]) -> PartitionLog | None:
        parts = self.topics.get(tp[0])
        if parts is None or not 0 <= tp[1] < len(parts):
            return None
        return parts[tp[1]]

    def txn_produce_check(self, batch: bytes, tp: tuple[str, int], version: int) -> int:
        if len(batch) < 61:
            return codes.CORRUPT_MESSAGE
        if not batch[22] & 0x10:  # attributes (low byte): not transactional
            return codes.NONE
        pid, epoch = _PID_EPOCH.unpack_from(batch, 43)
        return self.txns.is_member(pid, epoch, tp, version)

    def fence_producer(self, producer_id: int, epoch: int) -> None:
        for parts in self.topics.values():
            for plog in parts:
                plog.fence_epoch(producer_id, epoch)

    def loading(self, what: str) -> bool:
        """Whether ``what`` ("group" or "transaction" coordinator, "producer ids") is still
        being loaded: true for its window from the first time it is asked for."""
        window = (
            self.settings.producer_ids_load_s
            if what == "producer ids"
            else self.settings.coordinator_load_s
        )
        since = self._first_use.setdefault(what, time.monotonic())
        return time.monotonic() - since < window

    # --- versions ---------------------------------------------------------------------

    @property
    def features(self) -> dict[str, int]:
        """The finalized features, as ApiVersions v3+ answers them."""
        given = self.settings.features
        return dict(PROFILE_FEATURES.get(self.settings.profile, {}) if given is None else given)

    def api_versions(self) -> list[tuple[int, int, int]]:
        """(api key, min, max) as advertised in ApiVersions."""
        advertised = ADVERTISED_FLOORS.get(self.settings.profile, {})
        return [(key, advertised.get(key, lo), hi) for key, lo, hi in self._accepted_versions()]

    def _accepted_versions(self) -> list[tuple[int, int, int]]:
        out = []
        for key in self._apis:
            impl = _codec.implemented_versions(key)
            lo = max(impl[0], self._floors.get(key, 0))
            hi = min(impl[-1], self._caps.get(key, impl[-1]))
            if hi >= lo:  # a cap below the floor: the profile lacks the API
                out.append((key, lo, hi))
        return out

    def _accepts(self, api_key: int, version: int) -> bool:
        for key, lo, hi in self._accepted_versions():
            if key == api_key:
                return lo <= version <= hi
        return False
