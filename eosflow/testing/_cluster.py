"""``FakeCluster``: a one-broker Kafka cluster in-process, speaking the wire protocol.

It is a test double and the demo's embedded default, never a production path. Every
behaviour it has must also be a behaviour of genuine Kafka: the broker-contract tests in
``tests/contract`` run unchanged against both.

The broker is node 0 and coordinator of every group and transactional id. Requests on one
connection are handled one at a time, in order, as Kafka does (a connection is muted while
its request is in progress); clients that need concurrency open more connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .._protocol import _codes as codes
from . import _codec
from ._faults import FaultRule, error_body
from ._groups import GroupCoordinator, GroupSettings
from ._groups_consumer import ConsumerGroups
from ._handlers import HANDLERS
from ._log import PartitionLog
from ._sasl import ClusterSecurity, SaslConnection
from ._txn import TxnCoordinator, TxnSettings

log = logging.getLogger("eosflow.testing")

_MAX_FRAME = 100 * 1024 * 1024

# Version profiles: (floors, caps) by API key. "2.4" predates KIP-447; "2.5" has it (and
# KIP-360 InitProducerId v3) but not KIP-588; "4.0" has the KIP-896 floors, as genuine
# 4.0.0-4.4.0 advertise them (CreateTopics v2, DeleteTopics v1, DescribeConfigs v1 ...).
# The highest versions are the cluster's own (what _codec decodes), lower than Kafka's on
# purpose; within them the ranges are Kafka's (checked against 2.4.1 and 4.4.0 by
# tests/contract/test_broker_answers.py). A cap below the floor leaves the API out:
# ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) are Kafka 4's.
PROFILES: dict[str, tuple[dict[int, int], dict[int, int]]] = {
    "2.4": ({}, {0: 8, 28: 2, 9: 6, 22: 2, 26: 1, 25: 1, 24: 1, 12: 4, 3: 9, 68: -1, 69: -1}),
    "2.5": ({}, {0: 8, 28: 3, 9: 7, 22: 3, 26: 1, 25: 1, 24: 1, 3: 9, 68: -1, 69: -1}),
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


class FakeCluster:
    """An in-process Kafka broker on 127.0.0.1.

    ``async with FakeCluster() as cluster:`` then connect any Kafka client to
    ``cluster.bootstrap_servers``. Topics, logs, groups, offsets and transactions live in
    memory and survive ``stop()``/``start()`` (and ``crash()``), not the process.
    """

    node_id = 0

    def __init__(
        self, settings: ClusterSettings | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.settings = settings or ClusterSettings()
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
        self.faults: list[FaultRule] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._conn_tasks: set[asyncio.Task[Any]] = set()
        self._busy: set[asyncio.Task[Any]] = set()  # connections answering a request
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []
        self._floors, self._caps = PROFILES[self.settings.profile]
        self._first_use: dict[str, float] = {}

    # --- lifecycle ------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            return
        tls = self.settings.security.server_context() if self.settings.security else None
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=tls)
        self.port = self._server.sockets[0].getsockname()[1]
        self._tasks = [
            asyncio.create_task(self._session_sweeper()),
            asyncio.create_task(self._txn_sweeper()),
        ]
        log.info(
            "test cluster listening on %s (profile %s)",
            self.bootstrap_servers,
            self.settings.profile,
        )

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop listening, let requests in flight finish and answer (up to ``grace_s``),
        then close every connection. State is kept for ``start()``."""
        await self._shutdown(grace_s)

    async def crash(self) -> None:
        """Stop at once: requests in flight are lost without an answer, as when a broker
        process dies. State is kept for ``start()``."""
        await self._shutdown(0.0)

    async def _shutdown(self, grace_s: float) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        deadline = time.monotonic() + grace_s
        while self._busy and time.monotonic() < deadline:  # noqa: ASYNC110 (bounded drain)
            await asyncio.sleep(0.01)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
        if self._server is not None:
            for w in list(self._writers):
                w.close()
            conns = list(self._conn_tasks)
            for task in conns:
                task.cancel()
            await asyncio.gather(*conns, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None
        self._writers.clear()
        self._closing = False

    async def __aenter__(self) -> FakeCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- topics -----------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1) -> None:
        if partitions < 1:
            raise ValueError("a topic needs at least one partition")
        if name not in self.topics:
            self.topics[name] = [PartitionLog() for _ in range(partitions)]
            self.topic_ids[name] = uuid.uuid4()

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
        for key in sorted(HANDLERS):
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

    # --- controls ---------------------------------------------------------------------

    def intercept(self, api: str | int, **kwargs: Any) -> FaultRule:
        """Add a fault rule for an API (name like ``"EndTxn"`` or key); see ``_faults``."""
        key = api if isinstance(api, int) else _codec.API_KEYS[api]
        rule = FaultRule(key, **kwargs)
        self.faults.append(rule)
        return rule

    def remove_fault(self, rule: FaultRule) -> None:
        """Take a rule out before it is exhausted (e.g. ``times=None`` for a while)."""
        with contextlib.suppress(ValueError):
            self.faults.remove(rule)

    def committed(self, group_id: str, topic: str | None = None) -> dict[tuple[str, int], int]:
        """The group's committed offsets (optionally of one topic), as a reader of
        ``__consumer_offsets`` would see them now."""
        g = self.groups.get(group_id)
        if g is None:
            return {}
        return {tp: off for tp, (off, _) in g.offsets.items() if topic in (None, tp[0])}

    def delay_markers(self, topic: str, seconds: float) -> None:
        """Transaction markers of ``topic``'s partitions land ``seconds`` later than the
        rest (0 undoes it): a committed transaction's offsets can then be read back,
        stable, before that topic shows its records committed -- as on a cluster of
        several brokers whose leader of that topic is slow or moving."""
        if seconds > 0:
            self.txns.marker_lag[topic] = seconds
        else:
            self.txns.marker_lag.pop(topic, None)

    def force_rebalance(self, group_id: str) -> None:
        """A rebalance now: a classic group prepares one; a consumer-protocol group has
        its members removed, as their session timing out would, so that they rejoin."""
        g = self.groups.get(group_id)
        if g is not None and g.modern is not None:
            for member_id in list(g.modern.members):
                self.consumer_groups.remove(g.modern, member_id)
            return
        self.groups.force_rebalance(group_id)

    def expire_member(self, group_id: str, member_id: str | None = None) -> list[str]:
        return self.groups.expire_member(group_id, member_id)

    # --- serving ----------------------------------------------------------------------

    async def _session_sweeper(self) -> None:
        while True:
            await asyncio.sleep(self.settings.session_check_interval_s)
            for mid in self.groups.expire_sessions():
                log.info("evicted member %s: session timed out", mid)
            for mid in self.consumer_groups.expire():
                log.info("removed member %s: its session or revocation timed out", mid)

    async def _txn_sweeper(self) -> None:
        while True:
            await asyncio.sleep(self.settings.txns.sweep_interval_s)
            for txn in self.txns.abort_expired():
                log.info("aborted transaction of %s: transaction timeout", txn)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = peer[0] if peer else "127.0.0.1"
        self._writers.add(writer)
        sec = self.settings.security
        sasl = SaslConnection(sec) if sec is not None and sec.users is not None else None
        task = asyncio.current_task()
        if task is not None:
            self._conn_tasks.add(task)
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = struct.unpack(">i", head)
                if not 0 < size <= _MAX_FRAME:
                    log.warning("closing %s: bad frame size %d", host, size)
                    return
                data = await reader.readexactly(size)
                if task is not None:
                    self._busy.add(task)
                try:
                    if self.settings.latency_s:
                        await asyncio.sleep(self.settings.latency_s)
                    out = await self._answer(data, host, sasl)
                    if out is None:
                        return
                    writer.write(out)
                    await writer.drain()
                    if sasl is not None and sasl.close_after_answer:
                        return  # a refused login: answered, then closed, as Kafka
                finally:
                    if task is not None:
                        self._busy.discard(task)
                if self._closing:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        except asyncio.CancelledError:
            return  # the cluster is stopping; the connection just closes
        finally:
            if task is not None:
                self._conn_tasks.discard(task)
            self._writers.discard(writer)
            writer.close()

    async def _answer(
        self, data: bytes, host: str, sasl: SaslConnection | None = None
    ) -> bytes | None:
        """The encoded answer to one request, or None to close the connection."""
        try:
            frame = _codec.decode_request(data)
        except _codec.UnsupportedRequest as u:
            if u.api_key == 18:
                return _codec.encode_api_versions_error(u.correlation_id, self.api_versions())
            log.warning("closing connection: unsupported request %s", u)
            return None
        except Exception as exc:  # a malformed frame closes only its connection
            log.warning("closing connection: malformed request: %s", exc)
            return None
        if not self._accepts(frame.api_key, frame.version):
            if frame.api_key == 18:
                return _codec.encode_api_versions_error(frame.correlation_id, self.api_versions())
            log.warning(
                "closing connection: %s v%d not in profile %s",
                frame.api_name,
                frame.version,
                self.settings.profile,
            )
            return None
        if sasl is not None and not sasl.done:
            if not sasl.allowed(frame.api_key):
                log.warning("closing connection: %s before SASL login", frame.api_name)
                return None
            if frame.api_key == 17:
                return _codec.encode_response(frame, sasl.handshake(frame.body))
            if frame.api_key == 36:
                return _codec.encode_response(frame, sasl.authenticate(frame.body))
        rule = self._match_fault(frame)
        if rule is not None:
            rule._matched.set()
            if rule.hold:
                await rule._released.wait()
            if rule.delay_s:
                await asyncio.sleep(rule.delay_s)
            if rule.drop:
                return None
            if rule.error is not None:
                body = error_body(frame, rule.error, self._brokers())
                return _codec.encode_response(frame, body)
        body = await HANDLERS[frame.api_key](self, frame, host)
        if rule is not None and rule.drop_response:
            return None
        return _codec.encode_response(frame, body)

    def _brokers(self) -> list[dict[str, Any]]:
        return [{"node_id": self.node_id, "host": self.host, "port": self.port, "rack": None}]

    def _match_fault(self, frame: _codec.Frame) -> FaultRule | None:
        for rule in self.faults:
            if rule.matches(frame):
                rule.hits += 1
                rule.bodies.append(frame.body)
                if rule.exhausted:
                    self.faults.remove(rule)
                return rule
        return None
