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

Private names of aiokafka used here (``tests/unit/test_public_api.py`` checks that no other
module uses any, but ``_wire.py``'s ``_CLASSES``, and that this list is complete), read
only unless said: ``consumer._client``, ``consumer._coordinator`` (generation, member_id,
coordinator_id, _group_instance_id), ``producer._txn_manager`` (producer_id,
producer_epoch, its ``_transaction_waiter``'s error; written:
consumer_group_added), ``producer.client._wait_on_metadata``, ``producer._partition``,
``producer._max_request_size``, and ``producer._sender`` (its task is cancelled when a
stuck producer is closed by force).

Errors: this module is eosflow's one error boundary towards aiokafka and Kafka.
``map_error`` turns any aiokafka exception or Kafka error code into eosflow's tree
(``_errors.py``): fencing answers into ``Fenced`` (the session resolves them by KIP-360),
authorization failures into ``AuthorizationError``, broker and network failures worth a
retry into ``TransientError``, anything else into ``FatalError`` naming the step. The
session wraps each step in ``mapped(step)`` and catches only eosflow's errors. Retry loops
here are bounded in time, and running out of retries raises ``TransientError``: it never
comes back as "no error".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import ConnectionGroup
from aiokafka.errors import IllegalOperation, IllegalStateError, KafkaError, for_code
from aiokafka.protocol.admin import ApiVersionRequest

from . import _codes as codes
from . import _wire
from ._errors import AuthorizationError, EosflowError, FatalError, TransientError

log = logging.getLogger("eosflow.adapter")

UNKNOWN_SERVER_ERROR = codes.UNKNOWN_SERVER_ERROR
REQUEST_TIMED_OUT = codes.REQUEST_TIMED_OUT
NETWORK_EXCEPTION = codes.NETWORK_EXCEPTION
UNKNOWN_MEMBER_ID = codes.UNKNOWN_MEMBER_ID
REBALANCE_IN_PROGRESS = codes.REBALANCE_IN_PROGRESS
CONCURRENT_TRANSACTIONS = codes.CONCURRENT_TRANSACTIONS
UNSTABLE_OFFSET_COMMIT = codes.UNSTABLE_OFFSET_COMMIT
COORDINATOR_ERRORS = frozenset(
    {codes.COORDINATOR_LOAD_IN_PROGRESS, codes.COORDINATOR_NOT_AVAILABLE, codes.NOT_COORDINATOR}
)
FENCING = frozenset({codes.INVALID_PRODUCER_EPOCH, codes.PRODUCER_FENCED})
# answers worth sending the same request again for (within the step's time budget)
RETRY_CODES = COORDINATOR_ERRORS | {REQUEST_TIMED_OUT, NETWORK_EXCEPTION, CONCURRENT_TRANSACTIONS}
# broker answers that abort the transaction and retry it, rather than stop the app
TRANSIENT_CODES = RETRY_CODES | {
    UNKNOWN_SERVER_ERROR,
    codes.UNKNOWN_TOPIC_OR_PARTITION,  # metadata not yet propagated
    codes.LEADER_NOT_AVAILABLE,
    codes.NOT_LEADER_OR_FOLLOWER,
    codes.NOT_ENOUGH_REPLICAS,
    codes.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    REBALANCE_IN_PROGRESS,
    UNSTABLE_OFFSET_COMMIT,
    # the producer's own state is off (sequences, id mapping): a new epoch (KIP-360) fixes it
    codes.OUT_OF_ORDER_SEQUENCE_NUMBER,
    codes.INVALID_TXN_STATE,
    codes.INVALID_PRODUCER_ID_MAPPING,
    codes.UNKNOWN_PRODUCER_ID,
    codes.TRANSACTION_ABORTABLE,
}
# Kafka's authorization failures: the permission and resource kind each one means
AUTHORIZATION = {
    codes.TOPIC_AUTHORIZATION_FAILED: ("READ or WRITE", "a topic"),
    codes.GROUP_AUTHORIZATION_FAILED: ("READ", "the group"),
    codes.CLUSTER_AUTHORIZATION_FAILED: ("the needed ACL", "the cluster"),
    codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ("WRITE and DESCRIBE", "the transactional id"),
}

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

    def partition(self, topic: str, key: bytes | str | None, value: bytes | str | None) -> int:
        return int(self._producer._partition(topic, None, key, value, key, value))

    def partitions(self, topic: str) -> set[int]:
        """The topic's partitions as the producer's metadata knows them (after ``ready``)."""
        return set(self._producer.client.cluster.partitions_for_topic(topic) or ())


class Fenced(EosflowError):
    """The broker answered a fencing error (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED):
    either a newer instance owns the transactional id or our epoch timed out. Only the
    session can tell which (KIP-360); it never leaves the session."""


def map_error(exc: BaseException, step: str) -> EosflowError:
    """eosflow's error for ``exc`` raised during ``step`` (see the module docstring)."""
    if isinstance(exc, EosflowError):
        return exc
    code = getattr(exc, "errno", None)
    if is_fencing(exc):
        return Fenced(f"{step}: {exc!r}")
    if isinstance(code, int) and code in AUTHORIZATION:
        permission, resource = AUTHORIZATION[code]
        return AuthorizationError(step, permission, resource, error_name(code))
    if isinstance(code, int) and code in TRANSIENT_CODES:
        return TransientError(step, error_name(code))
    if isinstance(exc, KafkaError) and (exc.retriable or type(exc).__name__ == "KafkaError"):
        # aiokafka's bare KafkaError wraps an error answer it gave up on (e.g. "Unexpected
        # error during batch delivery"): a retry of the transaction may do
        return TransientError(step, _describe(exc))
    if isinstance(exc, (TimeoutError, OSError)):
        return TransientError(step, _describe(exc))
    if isinstance(exc, (IllegalOperation, AssertionError)) or type(exc).__name__ in (
        "IllegalStateError",
        "ConsumerStoppedError",
    ):
        # aiokafka's transaction manager or consumer in a state it cannot leave (e.g.
        # "Invalid state transition FATAL_ERROR -> ABORTING_TRANSACTION"): the session
        # replaces the producer (KIP-360) and goes on
        return TransientError(step, f"client state: {_describe(exc)}")
    if isinstance(exc, KafkaError):
        return FatalError(f"{step}: {_describe(exc)}")
    return FatalError(f"{step}: unexpected {_describe(exc)}")


@contextlib.contextmanager
def mapped(step: str) -> Iterator[None]:
    """Run a step, mapping whatever it raises into eosflow's tree (cancellation passes)."""
    try:
        yield
    except EosflowError:
        raise
    except Exception as exc:
        raise map_error(exc, step) from exc


def _describe(exc: BaseException) -> str:
    text, kind = str(exc), type(exc).__name__
    if not text:
        return kind
    return text if text.startswith(kind) else f"{kind}: {text}"


def is_fencing(exc: BaseException) -> bool:
    """Whether ``exc`` says another producer owns the transactional id."""
    return getattr(exc, "errno", None) in FENCING or type(exc).__name__ == "ProducerFenced"


def error_name(code: int) -> str:
    """Kafka's name of an error code, e.g. ILLEGAL_GENERATION."""
    return codes.name(code)


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
        return UNKNOWN_MEMBER_ID  # not in the group as far as we know
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
    transactional_id: str,
    group_id: str,
    offsets: dict[TopicPartition, int],
    caps: Capabilities,
    ident: GroupIdentity,
    timeout_s: float = 10.0,
) -> int:
    """AddOffsetsToTxn then TxnOffsetCommit (v3 with ``ident`` -- generation, member id,
    instance id -- when the broker has it). Returns 0 or the first Kafka error code that
    is not worth resending; resends coordinator moves, CONCURRENT_TRANSACTIONS, timeouts
    and dropped connections for at most ``timeout_s`` per request, then raises
    ``TransientError`` -- the offsets were not committed."""
    client = producer.client
    txn_id = transactional_id
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
    code = await _send_retrying(
        client, _TRANSACTION, txn_id, add, lambda r: int(r.error_code), "AddOffsetsToTxn", timeout_s
    )
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

    return await _send_retrying(
        client, _GROUP, group_id, commit, first_error, "TxnOffsetCommit", timeout_s
    )


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
    step = "OffsetFetch"
    deadline = time.monotonic() + timeout_s
    backoff = _Backoff()
    last = "no answer"
    while True:
        try:
            node = await _coordinator(client, _GROUP, group_id)
            resp = (await client.send(node, req, group=_COORD)).to_object()
        except (KafkaError, OSError) as exc:
            error = map_error(exc, step)
            if not isinstance(error, TransientError):
                raise error from exc
            _forget(client, _GROUP, group_id)
            last = error.cause
        else:
            out: dict[TopicPartition, int | None] = {}
            codes = {resp.get("error_code", 0)}
            for t in resp["topics"]:
                for p in t["partitions"]:
                    codes.add(p["error_code"])
                    off = p["committed_offset"]
                    tp = TopicPartition(t["name"], p["partition_index"])
                    out[tp] = off if off >= 0 else None
            codes.discard(0)
            if not codes:
                return out
            for code in codes:
                if code not in RETRY_CODES | {UNSTABLE_OFFSET_COMMIT, UNKNOWN_SERVER_ERROR}:
                    raise map_error(for_code(code)(), step)
            if codes & COORDINATOR_ERRORS:
                _forget(client, _GROUP, group_id)
            last = ", ".join(sorted(error_name(c) for c in codes))
        if time.monotonic() > deadline:
            raise TransientError(
                step, f"committed offsets of {group_id} not read within {timeout_s:g} s ({last})"
            )
        await backoff.sleep(deadline)


async def reinit_producer_id(
    producer: AIOKafkaProducer,
    transactional_id: str,
    transaction_timeout_s: float,
    timeout_s: float,
) -> tuple[int, int]:
    """KIP-360: InitProducerId v3+ with the producer's current id and epoch. The
    coordinator aborts whatever transaction is open and bumps the epoch. Returns the new
    (id, epoch). A fencing answer (another instance owns the transactional id) raises
    its KafkaError; coordinator moves and CONCURRENT_TRANSACTIONS are resent with a
    growing backoff for at most ``timeout_s``, then ``TransientError``."""
    client = producer.client
    pid, epoch = producer_identity(producer)
    req = _wire.SpecRequest.of(
        _wire.INIT_PRODUCER_ID,
        {
            "transactional_id": transactional_id,
            "transaction_timeout_ms": int(transaction_timeout_s * 1000),
            "producer_id": pid,
            "producer_epoch": epoch,
        },
        min_version=3,
    )
    deadline = time.monotonic() + timeout_s
    backoff = _Backoff()
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TransientError(
                "InitProducerId (KIP-360)", f"not done within {timeout_s:g} s ({last})"
            )
        node = await _coordinator(client, _TRANSACTION, transactional_id)
        # Not on the coordination connection: the EndTxn whose outcome is unknown may still
        # occupy it, and a broker answers one request per connection at a time.
        resp = await asyncio.wait_for(client.send(node, req), remaining)
        code = int(resp.error_code)
        if code == 0:
            return int(resp.producer_id), int(resp.producer_epoch)
        if code not in (CONCURRENT_TRANSACTIONS, *COORDINATOR_ERRORS):
            raise for_code(code)()
        if code in COORDINATOR_ERRORS:
            _forget(client, _TRANSACTION, transactional_id)
        last = error_name(code)
        await backoff.sleep(deadline)


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


class _Backoff:
    """Exponential backoff from 20 ms, doubling to a 1 s cap (as Kafka's clients grow
    ``retry.backoff.ms`` towards ``retry.backoff.max.ms``), never past a deadline."""

    def __init__(self, first_s: float = 0.02, cap_s: float = 1.0) -> None:
        self._next = first_s
        self._cap = cap_s

    async def sleep(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, min(self._next, deadline - time.monotonic())))
        self._next = min(self._next * 2, self._cap)


async def _send_retrying(
    client: Any,
    coord_type: int,
    key: str,
    req: Any,
    code_of: Any,
    step: str,
    timeout_s: float,
) -> int:
    """Send ``req`` to the coordinator of ``key`` and return its error code (0 or one not
    worth resending). Coordinator moves, CONCURRENT_TRANSACTIONS, timeouts and dropped
    connections are resent with a growing backoff for at most ``timeout_s``; then
    ``TransientError`` names ``step`` and the last cause. Running out of retries is an
    error, never "no error": a manufactured 0 would commit a transaction without its
    offsets."""
    deadline = time.monotonic() + timeout_s
    backoff = _Backoff()
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TransientError(step, f"no usable answer within {timeout_s:g} s (last: {last})")
        try:
            node = await asyncio.wait_for(_coordinator(client, coord_type, key), remaining)
            resp = await asyncio.wait_for(client.send(node, req, group=_COORD), remaining)
            code = int(code_of(resp))
        except (KafkaError, OSError, TimeoutError) as exc:
            error = map_error(exc, step)
            if not isinstance(error, TransientError):
                raise error from exc
            log.debug("resending %s after %r", step, exc)
            _forget(client, coord_type, key)
            last = error.cause
        else:
            if code not in RETRY_CODES:
                return code
            if code in COORDINATOR_ERRORS:
                _forget(client, coord_type, key)
            last = error_name(code)
        await backoff.sleep(deadline)


def error_for(code: int) -> KafkaError:
    """aiokafka's exception for a Kafka error code (for ``map_error``)."""
    exc: KafkaError = for_code(code)()
    return exc


def seek(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> bool:
    """Move ``tp``'s position; False when ``tp`` is no longer assigned (a rebalance took
    it: its next owner starts from the committed offset anyway)."""
    try:
        consumer.seek(tp, offset)
    except IllegalStateError:
        return False
    return True


async def seek_to_reset(consumer: AIOKafkaConsumer, tp: TopicPartition, reset: str) -> bool:
    """Move ``tp`` to the start or end of its log per ``reset``; False when unassigned."""
    try:
        if reset == "earliest":
            await consumer.seek_to_beginning(tp)
        else:
            await consumer.seek_to_end(tp)
    except IllegalStateError:
        return False
    return True


def pause(consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> None:
    consumer.pause(*partitions)


def resume(consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> None:
    """Resume ``partitions`` that are still assigned."""
    with contextlib.suppress(IllegalStateError):
        consumer.resume(*partitions)
