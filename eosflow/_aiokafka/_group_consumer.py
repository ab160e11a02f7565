"""The group consumer of the classic protocol: aiokafka's consumer in aiokafka's group,
built with eosflow's rebalance listener, and three parts of aiokafka's group handling
replaced on it -- its committed-offset refresh (eosflow positions every partition
itself: ``_own_positions``) and the tolerance of its heartbeat (``_patient``), both
found by the fault sweep (issue 50) to stop or hang an app under a failing group
coordinator; and the request timeout of its JoinGroup (``_long_joins``)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import CloseReason
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import KafkaError, RequestTimedOutError

from .._config import EosConfig
from ._clients import reading_settings

log = logging.getLogger("eosflow.adapter")

_JOIN_GROUP = 11  # the API key
_JOIN_MARGIN_S = 5.0  # past the rebalance timeout, as Kafka's Java consumer waits


Partitions = Callable[[set[TopicPartition]], Awaitable[None]]


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's rebalance listener, handing over to plain callbacks. aiokafka awaits
    these before rejoining / after syncing, and logs and swallows any exception raised
    in them; so one from ``assigned`` goes to ``failed`` instead."""

    def __init__(
        self, revoked: Partitions, assigned: Partitions, failed: Callable[[Exception], None]
    ) -> None:
        self._revoked, self._assigned, self._failed = revoked, assigned, failed
        self.consumer: AIOKafkaConsumer | None = None  # set once the consumer is built

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if self.consumer is not None:
            # before any await: the refresh task aiokafka has just started has not run
            _own_positions(self.consumer)
        try:
            await self._assigned(set(assigned))
        except Exception as exc:
            self._failed(exc)


def _own_positions(consumer: AIOKafkaConsumer) -> None:
    """Switch off aiokafka's own committed-offset refresh for the group consumer (and
    make its heartbeat patient: ``_patient``): eosflow
    positions every partition it is assigned (its own OffsetFetch, stable where the
    broker has KIP-447, or ``log_offsets`` where nothing is committed) and ``seek``
    answers aiokafka's fetcher, which waits for a new partition's committed offset.

    Why: aiokafka's refresh sends an OffsetFetch of its own to a coordinator that only
    its coordination routine finds again -- and that routine waits in eosflow's
    rebalance callback. An error answer it does not expect (UNKNOWN_SERVER_ERROR,
    COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT per partition) ends the refresh task
    for good, which stopped the app at start-up (issue 50); meanwhile aiokafka fetched
    nothing from that broker, the fetcher's position update holding its slot."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is not None:
        coordinator._maybe_refresh_commit_offsets = _answered_by_seek
        if not getattr(coordinator._do_heartbeat, "eosflow", False):
            coordinator._do_heartbeat = _patient(coordinator._do_heartbeat)


def _patient(heartbeat: Callable[[], Awaitable[bool]]) -> Callable[[], Awaitable[bool]]:
    """aiokafka's heartbeat, with an answer it does not expect (UNKNOWN_SERVER_ERROR: a
    broker's passing failure) taken as a failed heartbeat -- sent again after the
    backoff, the member lost once the session passes without one -- instead of ending
    its heartbeat task for good, which stopped the app ("group membership stopped"; the
    fault sweep's Heartbeat.loop cases). As eosflow's consumer-protocol member does."""

    async def beat() -> bool:
        try:
            return await heartbeat()
        except KafkaError as exc:
            if type(exc) is not KafkaError or "Unexpected exception" not in str(exc):
                raise
            log.warning("heartbeat failed (%s): sent again until the session ends", exc)
            return False

    beat.eosflow = True  # type: ignore[attr-defined]
    return beat


async def _answered_by_seek(assignment: Any) -> bool:
    """aiokafka's committed-offset refresh, switched off (``_own_positions``): nothing to
    send; its waiters are answered when eosflow positions their partition (``seek``)."""
    return True


def consumer_for(
    config: EosConfig,
    revoked: Partitions,
    assigned: Partitions,
    failed: Callable[[Exception], None],
    ranged: bool = False,
    client_id: str | None = None,
) -> AIOKafkaConsumer:
    """The group consumer of ``config`` (read_committed, no auto-commit), subscribed to
    its input topics; not started; ``client_id`` (``member_client_id``) or the config's.
    ``revoked`` is awaited before a rebalance goes on, ``assigned`` after one; what
    ``assigned`` raises goes to ``failed``. Every consumer eosflow runs is built here, so
    connection settings are set in one place. ``ranged``: the range assignor (partition
    p of every topic to one member, when their partition counts match); aiokafka's
    round robin otherwise."""
    listener = _Listener(revoked, assigned, failed)
    cfg = config
    assignors = (RangePartitionAssignor,) if ranged else (RoundRobinPartitionAssignor,)
    consumer = AIOKafkaConsumer(
        partition_assignment_strategy=assignors,
        group_id=cfg.group_id,
        group_instance_id=cfg.group_instance_id,
        session_timeout_ms=int(cfg.session_timeout_s * 1000),
        heartbeat_interval_ms=int(cfg.heartbeat_interval_s * 1000),
        max_poll_interval_ms=int(cfg.rebalance_timeout_s * 1000),
        rebalance_timeout_ms=int(cfg.rebalance_timeout_s * 1000),
        **reading_settings(cfg, client_id),
    )
    consumer.subscribe(list(cfg.input_topics), listener=listener)
    listener.consumer = consumer
    _long_joins(consumer._client, cfg.rebalance_timeout_s + _JOIN_MARGIN_S)
    return consumer


def _long_joins(client: AIOKafkaClient, join_timeout_s: float) -> None:
    """Give the group consumer's JoinGroup requests ``join_timeout_s`` (the rebalance
    timeout and 5 s, as Kafka's Java consumer does) instead of aiokafka's request
    timeout, 40 s, for all of them. The coordinator answers a JoinGroup only once every
    member has rejoined, or the rebalance timeout (60 s by default) has passed; a join
    given up at 40 s is sent again and the rebalance starts over (issue 51: a two-minute
    rebalance). Other requests keep aiokafka's timeout. The connection's
    ``_request_timeout`` is read once, when a request is written (``conn.send``); it is
    set for that call alone. A timed-out join closes the connection and raises
    ``RequestTimedOutError``, as aiokafka's ``send`` does."""
    send = client.send

    async def send_joins_long(
        node_id: int, request: Any, *, group: ConnectionGroup = ConnectionGroup.DEFAULT
    ) -> Any:
        if getattr(request, "API_KEY", None) != _JOIN_GROUP or not await client.ready(
            node_id, group=group
        ):
            return await send(node_id, request, group=group)  # (not ready: its error)
        conn = client._conns[(node_id, group)]
        usual = conn._request_timeout
        conn._request_timeout = max(usual, join_timeout_s)
        try:
            answer = conn.send(request)
        finally:
            conn._request_timeout = usual
        try:
            return await answer
        except TimeoutError as exc:
            conn.close(reason=CloseReason.CONNECTION_TIMEOUT)
            raise RequestTimedOutError() from exc

    client.send = send_joins_long
