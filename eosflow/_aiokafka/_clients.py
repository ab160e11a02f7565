"""The clients as eosflow sees them: group and producer identity, the producer's size
limit for hand-built batches (their partitions: ``_partitioner``), whether the producer
went fatal, closing a stuck producer by force, and consumer positions."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    OffsetAndMetadata,
    TopicPartition,
)
from aiokafka.errors import IllegalStateError, KafkaError

from .._config import EosConfig
from .._errors import FatalError, TransientError
from .._security import KafkaSecurity
from .._timeouts import within
from ._coordinators import forget_client
from ._errors import map_error, mapped
from ._fetch import AS_RECORD
from ._leaders import refreshes_leaders
from ._security import DIAGNOSE_TIMEOUT_S, connection_settings, diagnose

log = logging.getLogger("eosflow.adapter")


async def state_reader(config: EosConfig, role: str, poll_ms: int) -> AIOKafkaConsumer:
    """A started read_committed consumer outside the group, for eosflow's own reads of
    state (a store's changelog, a table's or a global table's topic): client id
    ``<client_id>-<role>``, from the log's start when a position is out of range,
    fetches answered within ``poll_ms``, 4 MiB per partition. A start that fails closes
    it and raises (mapped)."""
    consumer = plain_consumer(
        config.bootstrap_servers,
        config.security,
        client_id=f"{config.client_id}-{role}",
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=poll_ms,
        max_partition_fetch_bytes=4 << 20,
        retry_backoff_ms=int(config.retry_backoff_s * 1000),
    )
    try:
        await start(consumer, config, f"starting the {role} consumer", "READ")
    except BaseException:
        await close_consumer(consumer, timeout_s=5.0)  # no half-started client
        raise
    return consumer


def manual_consumer(config: EosConfig, client_id: str | None = None) -> AIOKafkaConsumer:
    """The consumer under the consumer group protocol (KIP-848): as ``consumer_for``'s
    but in no group of aiokafka's -- eosflow's ``_membership`` is the member and assigns
    it partitions (``reassign``). Its client id is the one its heartbeats carry."""
    return AIOKafkaConsumer(**reading_settings(config, client_id))


def member_client_id(config: EosConfig, started_us: int) -> str:
    """The client id of the app's group member: ``<client_id>-<transactional_id>-<started_us>``
    (the session's start, microseconds since the epoch). The group then names which
    member runs which transactional id, and since when: after a refused KIP-360
    re-initialisation that alone tells a newer instance from a forgotten epoch
    (``_engine/_reinit``). ``eosflow status`` shows it too."""
    return f"{config.client_id}-{config.transactional_id}-{started_us}"


def member_id_parts(client_id: str) -> tuple[str, int] | None:
    """What precedes the start in a member's client id, and the start (µs), if the id
    has ``member_client_id``'s shape (``<anything>-<decimal start>``); else None. The
    head is ``<client_id>-<transactional_id>``, both of which may hold dashes."""
    head, _, stamp = client_id.rpartition("-")
    if not (head and stamp.isascii() and stamp.isdecimal()):
        return None
    return head, int(stamp)


def member_started(config: EosConfig, client_id: str) -> int | None:
    """When the member of ``client_id`` started, if it runs ``config``'s transactional id
    (``member_client_id``, whatever client id it was given); else None."""
    parts = member_id_parts(client_id)
    if parts is None or not parts[0].endswith(f"-{config.transactional_id}"):
        return None
    return parts[1]


def reading_settings(cfg: EosConfig, client_id: str | None = None) -> dict[str, Any]:
    """What every consumer of the app reads with: read_committed, no auto-commit,
    eosflow ``Record``s from ``getmany`` (``_fetch``), the connection settings."""
    return dict(
        bootstrap_servers=cfg.bootstrap_servers,
        client_id=client_id or cfg.client_id,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset=cfg.auto_offset_reset,
        retry_backoff_ms=int(cfg.retry_backoff_s * 1000),
        key_deserializer=AS_RECORD,
        **connection_settings(cfg.security),
    )


def producer_for(config: EosConfig, batch_bytes: int | None = None) -> AIOKafkaProducer:
    """The transactional producer of ``config``, its batches up to ``batch_bytes`` (None:
    ``max_batch_bytes``); not started."""
    cfg = config
    return AIOKafkaProducer(
        bootstrap_servers=cfg.bootstrap_servers,
        client_id=cfg.client_id,
        transactional_id=cfg.transactional_id,
        transaction_timeout_ms=int(cfg.transaction_timeout_s * 1000),
        retry_backoff_ms=int(cfg.retry_backoff_s * 1000),
        linger_ms=int(cfg.linger_s * 1000),
        max_batch_size=cfg.max_batch_bytes if batch_bytes is None else batch_bytes,
        **connection_settings(cfg.security),
    )


def plain_consumer(
    bootstrap_servers: str, security: KafkaSecurity | None = None, **kw: Any
) -> AIOKafkaConsumer:
    """A consumer outside any group (the checker's), with ``security``'s settings."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        **connection_settings(security or KafkaSecurity()),
        **kw,
    )


def plain_producer(
    bootstrap_servers: str, security: KafkaSecurity | None = None, **kw: Any
) -> AIOKafkaProducer:
    """A non-transactional producer (the checker's), with ``security``'s settings."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers,
        **connection_settings(security or KafkaSecurity()),
        **kw,
    )


class Endpoint(Protocol):
    """Where a client connects and how: ``EosConfig`` is one."""

    @property
    def bootstrap_servers(self) -> str: ...

    @property
    def security(self) -> KafkaSecurity: ...


async def start(
    client: AIOKafkaConsumer | AIOKafkaProducer,
    endpoint: Endpoint,
    step: str,
    topics: str | None = None,
    reached: bool = False,
) -> None:
    """Start ``client``; every failure mapped (``map_error``, ``topics`` as there). A
    bootstrap that failed with security on is diagnosed first: a refused password or
    certificate is an ``AuthenticationError`` saying which, not "no bootstrap server
    answered". That line is fatal -- a wrong address far more often than an outage --
    unless the servers were ``reached`` before (a replacement client, mid-run): then it
    is a ``TransientError``, retried like any broker failure."""
    try:
        await client.start()
        if isinstance(client, AIOKafkaConsumer):
            refreshes_leaders(client)  # a position reset finds a moved leader
    except Exception as exc:
        if reached and "Unable to bootstrap" in str(exc):
            raise TransientError(step, f"no bootstrap server answered ({exc!r})") from exc
        security = endpoint.security
        # aiokafka takes a refused OAUTHBEARER token for a login and fails later, in other
        # words ("Did we not perform bootstrap?"): any failed start is diagnosed then
        token = security.sasl_mechanism == "OAUTHBEARER"
        if token or (
            security.security_protocol != "PLAINTEXT" and "Unable to bootstrap" in str(exc)
        ):
            await diagnose(endpoint.bootstrap_servers, security, DIAGNOSE_TIMEOUT_S)
        raise map_error(exc, step, topics) from exc


@dataclass(frozen=True)
class GroupIdentity:
    generation: int
    member_id: str
    instance_id: str | None
    coordinator_id: int | None


def group_identity(consumer: AIOKafkaConsumer) -> GroupIdentity:
    coord = consumer._coordinator
    return GroupIdentity(
        generation=coord.generation,
        member_id=coord.member_id,
        instance_id=getattr(coord, "_group_instance_id", None),
        coordinator_id=getattr(coord, "coordinator_id", None),
    )


def producer_identity(producer: AIOKafkaProducer) -> tuple[int, int]:
    txn = producer._txn_manager
    return int(txn.producer_id), int(txn.producer_epoch)


def max_request_bytes(producer: AIOKafkaProducer) -> int:
    """The largest record ``producer.send`` accepts (its ``max_request_size``): batches
    built by hand skip that check."""
    return int(producer._max_request_size)


class Batch:
    """One partition's batch being filled: aiokafka's ``BatchBuilder``, appended to
    through its record builder's own ``append`` (the C one when aiokafka's extension is
    built). ``BatchBuilder.append`` wraps that call in three Python frames (keywords, a
    closed check, serializers eosflow never sets): ~0.2 us of a pass-through's ~3 us per
    record. ``append`` keeps the count the wrapper would keep (each record's offset in
    the batch) and ``builder`` writes it back, closing a full batch as the wrapper does.

    ``append`` raises ``TypeError`` for a key or value that is not bytes (the caller
    names the output) and returns None when the batch is full."""

    __slots__ = ("_add", "built", "count")

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.built = producer.create_batch()  # aiokafka's BatchBuilder
        self._add = self.built._builder.append
        self.count = 0

    def append(
        self,
        key: object,
        value: object,
        headers: list[tuple[str, bytes]],
        timestamp: int | None = None,
    ) -> Any:
        meta = self._add(self.count, timestamp, key, value, headers)
        if meta is not None:
            self.count += 1
        return meta

    def sync(self) -> None:
        """Write the record count back into the ``BatchBuilder`` (aiokafka's sender reads
        it for the batch's sequence numbers)."""
        self.built._relative_offset = self.count

    def builder(self, full: bool) -> Any:
        """The ``BatchBuilder`` for ``send_batch``: its record count set, closed if ``full``."""
        self.sync()
        if full:
            self.built.close()
        return self.built


def producer_failure(producer: AIOKafkaProducer) -> BaseException | None:
    """The error that put aiokafka's transaction manager into its fatal state (after which
    every send is refused), or None while the producer is usable."""
    txn = producer._txn_manager
    if not txn.is_fatal_error():
        return None
    waiter = getattr(txn, "_transaction_waiter", None)
    if waiter is not None and waiter.done() and not waiter.cancelled():
        exc: BaseException | None = waiter.exception()
        if exc is not None:
            return exc
    failure: BaseException = KafkaError("transactional producer in fatal state")
    return failure


async def close_producer(producer: AIOKafkaProducer, timeout_s: float) -> None:
    """Stop ``producer``; if it does not stop within ``timeout_s`` (its sender may be
    stuck retrying a request that will never be answered), cancel its sender and close
    its connections, so no half-dead client is left behind. Its cached coordinators go."""
    forget_client(producer.client)
    # A fenced or failed transaction leaves its error on aiokafka's waiter future; retrieve
    # it so asyncio does not report it as never retrieved (eosflow has handled it).
    waiter = getattr(producer._txn_manager, "_transaction_waiter", None)
    if waiter is not None and waiter.done() and not waiter.cancelled():
        waiter.exception()
    if await _stopped("producer", producer.stop(), timeout_s):
        return
    sender = getattr(producer, "_sender", None)
    task = getattr(sender, "sender_task", None)
    if task is not None:
        await _cancel_until_done(task)
    with _only_theirs():
        # its requests in flight were cancelled with the sender: their futures are
        # gathered here and raise CancelledError, which is not a cancellation of ours
        await producer.client.close()


async def close_consumer(consumer: AIOKafkaConsumer, timeout_s: float) -> None:
    """Stop ``consumer`` (leave the group, close its fetcher and connections); past
    ``timeout_s``, or when ``stop()`` fails half-way, close its connections by force.

    aiokafka's fetcher cancels its pending fetch tasks and awaits them; one that was
    sleeping its retry backoff after a failed fetch raises that CancelledError, which is
    not the caller's. It ended a stopping app with a CancelledError in place of the
    AuthenticationError that stopped it, and left the consumer's connections open."""
    forget_client(consumer._client)
    if await _stopped("consumer", consumer.stop(), timeout_s):
        return
    fetcher = getattr(consumer, "_fetcher", None)
    for task in list(getattr(fetcher, "_pending_tasks", ())):
        await _cancel_until_done(task)
    with _only_theirs():
        await consumer._client.close()


async def _stopped(name: str, stop: Awaitable[None], timeout_s: float) -> bool:
    """Await a client's ``stop()`` for ``timeout_s``: True when it completed, False when
    it ran out of time or failed (the caller then closes the client by force)."""
    with _only_theirs():
        try:
            await within(stop, timeout_s)
            return True
        except (TimeoutError, KafkaError) as exc:
            log.warning("%s did not stop cleanly (%r); closing it by force", name, exc)
    return False


async def _cancel_until_done(task: asyncio.Future[Any], attempts: int = 5) -> None:
    """Cancel ``task`` until it has ended. One cancel is not always enough: cancelled,
    aiokafka's sender awaits its own sub-tasks, and one retrying a coordinator lookup
    that never succeeds (a login refused for good) never ends; the next cancel reaches
    it through that await. Past ``attempts`` (one second each) the task is abandoned,
    logged. A cancellation of the caller passes."""
    for _ in range(attempts):
        if task.done():
            break
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    if not task.done():
        log.warning("closing by force: %r did not end after %d cancels", task, attempts)
    elif not task.cancelled():
        task.exception()  # retrieved: what a client closed by force raises is not news


@contextlib.contextmanager
def _only_theirs() -> Iterator[None]:
    """Swallow what a client being closed by force raises -- CancelledError included,
    unless the task running this is itself being cancelled: that one passes."""
    try:
        yield
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception as exc:
        log.debug("closing by force: %r", exc)


def seek(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> bool:
    """Move ``tp``'s position; False when ``tp`` is no longer assigned (a rebalance took
    it: its next owner starts from the committed offset anyway). aiokafka's fetcher, if
    it waits for ``tp``'s committed offset (``own_positions``), is told it now has a
    position and goes on."""
    try:
        consumer.seek(tp, offset)
    except IllegalStateError:
        return False
    assignment = consumer._subscription.subscription.assignment
    assignment.state_value(tp).update_committed(OffsetAndMetadata(offset, ""))
    return True


async def commit_offsets(consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
    """A plain OffsetCommit of ``offsets`` for the consumer's group (classic protocol),
    outside any transaction: a sink's positions shown to lag and ``eosflow status``.
    Every failure mapped (``map_error``): a rebalance meanwhile is a ``TransientError``."""
    try:
        await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
    except (KafkaError, OSError) as exc:
        raise map_error(exc, "OffsetCommit") from exc


async def poll(
    consumer: AIOKafkaConsumer, timeout_s: float, max_records: int | None
) -> dict[TopicPartition, list[Any]]:
    """aiokafka's ``getmany``, waiting at most ``timeout_s`` for an assignment. While
    none is in place -- none given yet (under the consumer group protocol, a standby
    member or one whose input topic does not exist), or a rebalance in progress --
    aiokafka's ``getmany`` waits for one however long it takes; so a caller that reads
    a stop flag between polls never read it (issue 51: a standby ran on 58 s after
    SIGTERM). Then this returns nothing once ``timeout_s`` has passed. A failure after
    which aiokafka's group handling is over (``consumer_failure``) is a ``FatalError``.

    The wait counts as a poll for aiokafka (``fetch_context``, as ``getmany`` does): its
    classic coordinator does not rejoin, and its heartbeat leaves the group, once no
    poll was made for ``max_poll_interval`` -- a rebalance waited out here would
    otherwise never end (seen in the fault sweep: the group never re-formed). And, as
    ``getmany`` does, it raises the error aiokafka's coordinator holds for the caller
    (``check_errors``): the coordinator waits until it is taken (an unexpected SyncGroup
    answer left the group stuck mid-rebalance, seen in the sweep too)."""
    subscription = consumer._subscription
    began = time.monotonic()
    if subscription.reassignment_in_progress:
        consumer._coordinator.check_errors()
        waiter = subscription.wait_for_assignment()
        try:
            with subscription.fetch_context():
                await asyncio.wait({waiter}, timeout=timeout_s)
        finally:
            if not waiter.done():
                waiter.cancel()
            elif not waiter.cancelled():
                waiter.exception()  # a coordination error: getmany raises it below
        if subscription.reassignment_in_progress:
            consumer._coordinator.check_errors()
            return {}
    left_ms = int(max(0.0, timeout_s - (time.monotonic() - began)) * 1000)
    try:
        batch: dict[TopicPartition, list[Any]] = await consumer.getmany(
            timeout_ms=left_ms, max_records=max_records
        )
    except (KafkaError, OSError) as exc:
        stuck = consumer_failure(consumer)  # no heartbeats any more: no retry helps
        if stuck is not None:
            raise FatalError(f"group membership stopped: the consumer ended on {stuck!r}") from exc
        raise
    return batch


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str, timeout_s: float) -> list[int]:
    """``topic``'s partition numbers as the cluster's metadata gives them, asked again
    until ``timeout_s`` (a topic created a moment ago may not be in it yet); then a
    ``FatalError`` saying it does not exist."""
    client = consumer._client
    client.add_topic(topic)
    deadline = time.monotonic() + timeout_s
    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return sorted(parts)
        if time.monotonic() > deadline:
            raise FatalError(f"topic {topic!r} does not exist (no metadata in {timeout_s:g} s)")
        with mapped(f"metadata of {topic}", "READ"):
            await client.force_metadata_update()
        await asyncio.sleep(0.2)


def position_now(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """``tp``'s position, or None while it has none (an offset reset pending) or is not
    assigned. Never awaits, unlike aiokafka's ``position()`` (see ``log_position``)."""
    if tp not in consumer.assignment():
        return None
    state = consumer._subscription.subscription.assignment.state_value(tp)
    return int(state.position) if state.has_valid_position else None


def log_position(consumer: AIOKafkaConsumer, tp: TopicPartition) -> tuple[int, int | None] | None:
    """``tp``'s last stable offset, as the last fetch answer gave it (read_committed: an
    open transaction on the input holds it back, where the high watermark would count
    records nobody can read yet), and the consumer's position (None if it has none yet).
    None when ``tp`` is no longer assigned or has not been fetched since it was assigned
    (paused, restoring). Never awaits: aiokafka's ``position()`` waits for an offset
    reset, which a broker outage can hold up."""
    if tp not in consumer.assignment():
        return None
    end = consumer.last_stable_offset(tp)
    if end is None or end < 0:
        return None
    return int(end), position_now(consumer, tp)


def pause(consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> None:
    """Pause ``partitions``. While a partition is paused, the group consumer's fetches to
    its broker wait at most ``SHORT_FETCH_WAIT_MS`` there (``_fetch._Fetcher``), so it
    does not wait long behind a fetch held for the others once resumed."""
    consumer.pause(*partitions)


def resume(consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> None:
    """Resume ``partitions`` that are still assigned."""
    with contextlib.suppress(IllegalStateError):
        consumer.resume(*partitions)


def consumer_failure(consumer: AIOKafkaConsumer) -> BaseException | None:
    """The error that stopped ``consumer``'s group handling, or None. aiokafka's heartbeat
    and committed-offset refresh tasks end on an error answer they do not expect (e.g.
    UNKNOWN_SERVER_ERROR to a Heartbeat or to its own OffsetFetch); its coordinator then
    raises that error from every poll, sends no more heartbeats and never recovers."""
    coordinator = getattr(consumer, "_coordinator", None)
    for name in ("_coordination_task", "_heartbeat_task", "_commit_refresh_task"):
        task = getattr(coordinator, name, None)
        if task is not None and task.done() and not task.cancelled():
            exc: BaseException | None = task.exception()
            if exc is not None:
                return exc
    return None
