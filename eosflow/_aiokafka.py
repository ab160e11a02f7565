"""The adapter: the only eosflow module that reaches into aiokafka's private state.

aiokafka 0.14 speaks v0 of the transaction APIs. What eosflow adds, it adds here:

- capability detection from ApiVersions (KIP-447: TxnOffsetCommit v3 + OffsetFetch v7;
  KIP-360: InitProducerId v3);
- the transactional offset commit (AddOffsetsToTxn, then TxnOffsetCommit at the newest
  version the broker has -- v3 carries generation, member id and instance id so the group
  coordinator fences a zombie). aiokafka's own path sends v0 and turns ILLEGAL_GENERATION
  into a fatal sender crash, so eosflow sends both requests itself and tells aiokafka's
  transaction manager that a group joined the transaction (so its EndTxn is not skipped);
- the forced heartbeat before EndTxn, with the consumer's current generation and member id;
- stable committed-offset fetches (OffsetFetch v7 RequireStable, retrying
  UNSTABLE_OFFSET_COMMIT);
- KIP-360 re-initialisation (InitProducerId v3+ with the current id and epoch);
- the producer's partitioner, for outputs produced as whole batches (``send_batch`` needs
  the partition up front; choosing it here keeps ``send``'s choice: murmur2 of the key).

Private attributes used, all read-only: ``consumer._client``, ``consumer._coordinator``
(generation, member_id, coordinator_id, _group_instance_id), ``producer._txn_manager``
(producer_id, producer_epoch, consumer_group_added), ``producer.client._wait_on_metadata``,
``producer._partition`` and ``producer._max_request_size``. Errors come back as Kafka
error codes (ints) and are mapped to eosflow's error tree by the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import ConnectionGroup
from aiokafka.errors import IllegalOperation, KafkaError, for_code
from aiokafka.protocol.admin import ApiVersionRequest

from . import _wire

log = logging.getLogger("eosflow.adapter")

UNSTABLE_OFFSET_COMMIT = 88
CONCURRENT_TRANSACTIONS = 51
COORDINATOR_ERRORS = frozenset({14, 15, 16})  # load in progress, not available, not coordinator
REBALANCE_IN_PROGRESS = 27
FENCING = frozenset({47, 90})  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED

_GROUP = 0
_TRANSACTION = 1
# coordinator traffic on its own connections, as aiokafka does: a long-polling fetch on the
# default connection must not delay a heartbeat or a commit
_COORD = ConnectionGroup.COORDINATION


SEND_REFUSED: tuple[type[BaseException], ...] = (KafkaError, IllegalOperation)
"""What ``AIOKafkaProducer.send``/``send_batch`` raise when they refuse records: Kafka
errors, and ``IllegalOperation`` (not a KafkaError) once the transaction manager went
fatal."""


def max_request_bytes(producer: AIOKafkaProducer) -> int:
    """The largest record ``producer.send`` accepts (its ``max_request_size``): batches
    built by hand skip that check."""
    return int(producer._max_request_size)


class Partitioner:
    """The partition ``producer.send`` would pick for a record without one: the producer's
    partitioner (murmur2 of the key; any available partition for a null key) over the
    topic's current metadata. ``ready`` fetches a topic's metadata; topics in ``known``
    have it (checked without a coroutine per record on the hot path)."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer
        self.known: set[str] = set()

    async def ready(self, topic: str) -> None:
        if topic not in self.known:
            await self._producer.client._wait_on_metadata(topic)
            self.known.add(topic)

    def partition(self, topic: str, key: bytes | None, value: bytes | None) -> int:
        return int(self._producer._partition(topic, None, key, value, key, value))

    def partitions(self, topic: str) -> set[int]:
        """The topic's partitions as the producer's metadata knows them (after ``ready``)."""
        return set(self._producer.client.cluster.partitions_for_topic(topic) or ())


def is_fencing(exc: BaseException) -> bool:
    """Whether ``exc`` says another producer owns the transactional id."""
    return getattr(exc, "errno", None) in FENCING or type(exc).__name__ == "ProducerFenced"


def error_name(code: int) -> str:
    """Kafka's name of an error code, e.g. ILLEGAL_GENERATION."""
    return str(getattr(for_code(code), "message", code)) if code else "NONE"


@dataclass(frozen=True)
class Capabilities:
    """What the broker speaks, from its ApiVersions answer."""

    txn_offset_commit: int
    offset_fetch: int
    init_producer_id: int

    @property
    def kip447(self) -> bool:
        return self.txn_offset_commit >= 3 and self.offset_fetch >= 7

    @property
    def kip360(self) -> bool:
        return self.init_producer_id >= 3


@dataclass(frozen=True)
class GroupIdentity:
    generation: int
    member_id: str
    instance_id: str | None
    coordinator_id: int | None


async def capabilities(producer: AIOKafkaProducer) -> Capabilities:
    client = producer.client
    node = client.get_random_node()
    resp = await client.send(node, ApiVersionRequest())
    top = {key: hi for key, _lo, hi in resp.api_versions}
    return Capabilities(top.get(28, -1), top.get(9, -1), top.get(22, -1))


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


async def forced_heartbeat(
    consumer: AIOKafkaConsumer, group_id: str, identity: GroupIdentity | None = None
) -> int:
    """Send a heartbeat now and wait for its answer; returns the Kafka error code (0 when
    the membership is confirmed). It carries ``identity``'s generation and member id --
    those the transaction's partitions were assigned under -- so a member that has moved
    on to a newer generation since is not confirmed for older work (ILLEGAL_GENERATION);
    without ``identity``, the consumer's current ones."""
    current = group_identity(consumer)
    ident = identity or current
    if current.coordinator_id is None or ident.generation < 0:
        return 25  # UNKNOWN_MEMBER_ID: not in the group as far as we know
    req = _wire.SpecRequest.of(
        _wire.HEARTBEAT,
        {
            "group_id": group_id,
            "generation_id": ident.generation,
            "member_id": ident.member_id,
            "group_instance_id": ident.instance_id,
        },
    )
    resp = await consumer._client.send(current.coordinator_id, req, group=_COORD)
    return int(resp.error_code)


async def commit_offsets_in_txn(
    producer: AIOKafkaProducer,
    group_id: str,
    offsets: dict[TopicPartition, int],
    caps: Capabilities,
    ident: GroupIdentity,
) -> int:
    """AddOffsetsToTxn then TxnOffsetCommit (v3 with ``ident`` -- generation, member id,
    instance id -- when the broker has it). Returns 0 or the first Kafka error code;
    retries coordinator moves and CONCURRENT_TRANSACTIONS."""
    client = producer.client
    txn_id = producer._txn_manager.transactional_id
    pid, epoch = producer_identity(producer)
    add = _wire.SpecRequest.of(
        _wire.ADD_OFFSETS_TO_TXN,
        {
            "transactional_id": txn_id,
            "producer_id": pid,
            "producer_epoch": epoch,
            "group_id": group_id,
        },
    )
    code = await _send_retrying(client, _TRANSACTION, txn_id, add, lambda r: int(r.error_code))
    if code:
        return code
    producer._txn_manager.consumer_group_added(group_id)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, off in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": off,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    body = {
        "transactional_id": txn_id,
        "group_id": group_id,
        "producer_id": pid,
        "producer_epoch": epoch,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }
    if caps.txn_offset_commit >= 3:
        body.update(
            generation_id=ident.generation,
            member_id=ident.member_id,
            group_instance_id=ident.instance_id,
        )
    commit = _wire.SpecRequest.of(_wire.TXN_OFFSET_COMMIT, body)

    def first_error(resp: Any) -> int:
        for topic in resp.to_object()["topics"]:
            for part in topic["partitions"]:
                if part["error_code"]:
                    return int(part["error_code"])
        return 0

    return await _send_retrying(client, _GROUP, group_id, commit, first_error)


async def fetch_committed(
    consumer: AIOKafkaConsumer,
    group_id: str,
    partitions: list[TopicPartition],
    require_stable: bool,
    timeout_s: float,
) -> dict[TopicPartition, int | None]:
    """Committed offsets of ``partitions`` (None where nothing is committed). With
    ``require_stable`` (OffsetFetch v7) a partition held by an open transaction is retried
    until that transaction completes or ``timeout_s`` passes (then TimeoutError)."""
    client = consumer._client
    topics: dict[str, list[int]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    body = {
        "group_id": group_id,
        "require_stable": require_stable,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
    }
    req = _wire.SpecRequest.of(_wire.OFFSET_FETCH, body, min_version=7 if require_stable else 1)
    deadline = time.monotonic() + timeout_s
    while True:
        node = await _coordinator(client, _GROUP, group_id)
        resp = (await client.send(node, req, group=_COORD)).to_object()
        out: dict[TopicPartition, int | None] = {}
        moved = resp.get("error_code", 0) in COORDINATOR_ERRORS
        retry = moved
        for t in resp["topics"]:
            for p in t["partitions"]:
                err = p["error_code"]
                if err in COORDINATOR_ERRORS:
                    moved = retry = True
                elif err == UNSTABLE_OFFSET_COMMIT:
                    retry = True
                elif err:
                    raise for_code(err)()
                off = p["committed_offset"]
                out[TopicPartition(t["name"], p["partition_index"])] = off if off >= 0 else None
        if moved:
            _forget(client, _GROUP, group_id)
        if not retry:
            return out
        if time.monotonic() > deadline:
            raise TimeoutError(f"committed offsets of {group_id} stayed unstable")
        await asyncio.sleep(0.02)


async def reinit_producer_id(producer: AIOKafkaProducer, timeout_s: float) -> tuple[int, int]:
    """KIP-360: InitProducerId v3+ with the producer's current id and epoch. The
    coordinator aborts whatever transaction is open and bumps the epoch. Returns the new
    (id, epoch); raises KafkaError carrying PRODUCER_FENCED / INVALID_PRODUCER_EPOCH when
    another instance owns the transactional id."""
    client = producer.client
    txn = producer._txn_manager
    pid, epoch = producer_identity(producer)
    req = _wire.SpecRequest.of(
        _wire.INIT_PRODUCER_ID,
        {
            "transactional_id": txn.transactional_id,
            "transaction_timeout_ms": txn.transaction_timeout_ms,
            "producer_id": pid,
            "producer_epoch": epoch,
        },
        min_version=3,
    )

    def code_of(resp: Any) -> int:
        return int(resp.error_code)

    deadline = time.monotonic() + timeout_s
    while True:
        node = await _coordinator(client, _TRANSACTION, txn.transactional_id)
        # Not on the coordination connection: the EndTxn whose outcome is unknown may still
        # occupy it, and a broker answers one request per connection at a time.
        resp = await asyncio.wait_for(client.send(node, req), timeout_s)
        code = code_of(resp)
        if code == 0:
            return int(resp.producer_id), int(resp.producer_epoch)
        if code not in (CONCURRENT_TRANSACTIONS, *COORDINATOR_ERRORS) or (
            time.monotonic() > deadline
        ):
            raise for_code(code)()
        if code in COORDINATOR_ERRORS:
            _forget(client, _TRANSACTION, txn.transactional_id)
        await asyncio.sleep(0.02)


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
    client_id = id(producer.client)
    for slot in [s for s in _coordinators if s[0] == client_id]:
        del _coordinators[slot]
    # A fenced or failed transaction leaves its error on aiokafka's waiter future; retrieve
    # it so asyncio does not report it as never retrieved (eosflow has handled it).
    waiter = getattr(producer._txn_manager, "_transaction_waiter", None)
    if waiter is not None and waiter.done() and not waiter.cancelled():
        waiter.exception()
    try:
        await asyncio.wait_for(producer.stop(), timeout_s)
        return
    except (TimeoutError, KafkaError) as exc:
        log.warning("producer did not stop cleanly (%r); closing it by force", exc)
    sender = getattr(producer, "_sender", None)
    task = getattr(sender, "sender_task", None)
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    with contextlib.suppress(Exception):
        await producer.client.close()


_coordinators: dict[tuple[int, int, str], int] = {}


async def _coordinator(client: Any, coord_type: int, key: str) -> int:
    """The coordinator node of ``key``, cached per client. aiokafka's
    ``coordinator_lookup`` asks the cluster every time: two extra round trips per commit
    otherwise. ``_forget`` drops an entry when the broker says it moved."""
    slot = (id(client), coord_type, key)
    node = _coordinators.get(slot)
    if node is None:
        node = int(await client.coordinator_lookup(coord_type, key))
        _coordinators[slot] = node
    return node


def _forget(client: Any, coord_type: int, key: str) -> None:
    _coordinators.pop((id(client), coord_type, key), None)


async def _send_retrying(
    client: Any, coord_type: int, key: str, req: Any, code_of: Any, attempts: int = 50
) -> int:
    """Send to the coordinator of ``key``, retrying coordinator moves and
    CONCURRENT_TRANSACTIONS a bounded number of times; returns the final error code."""
    code = 0
    for _ in range(attempts):
        try:
            node = await _coordinator(client, coord_type, key)
            code = int(code_of(await client.send(node, req, group=_COORD)))
        except KafkaError as exc:
            log.debug("retrying %s after %r", type(req).__name__, exc)
            _forget(client, coord_type, key)
            await asyncio.sleep(0.05)
            continue
        if code in COORDINATOR_ERRORS:
            _forget(client, coord_type, key)
        if code in COORDINATOR_ERRORS or code == CONCURRENT_TRANSACTIONS:
            await asyncio.sleep(0.02)
            continue
        return code
    return code
