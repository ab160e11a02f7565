"""The requests aiokafka 0.14 lacks, sent on its connections: capabilities from
ApiVersions, the KIP-447 transactional offset commit, the forced heartbeat, stable
committed-offset fetches and the KIP-360 re-initialisation. Coordinator lookups are cached
per client; every retry loop is bounded in time with a growing backoff and ends in
``TransientError`` -- never in a manufactured "no error"."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import ConnectionGroup
from aiokafka.errors import KafkaError

from .._errors import TransientError
from .._protocol import codes, specs, wire
from .._timeouts import within
from ._clients import GroupIdentity, group_identity, producer_identity
from ._coordinators import coordinator as _coordinator
from ._coordinators import forget as _forget
from ._errors import (
    AUTHORIZATION,
    COORDINATOR_ERRORS,
    RETRY_CODES,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_SERVER_ERROR,
    UNSTABLE_OFFSET_COMMIT,
    error_for,
    error_name,
    map_error,
)
from ._txn_v2 import transactions_v2

log = logging.getLogger("eosflow.adapter")

GROUP_COORDINATOR = 0
_TRANSACTION = 1
# coordinator traffic on its own connections, as aiokafka does: a long-polling fetch on the
# default connection must not delay a heartbeat or a commit
_COORD = ConnectionGroup.COORDINATION


@dataclass(frozen=True)
class Capabilities:
    """What the broker speaks, from its ApiVersions answer: the highest version of each
    API eosflow's choices depend on (-1: none), and the cluster's finalized features
    (KIP-584; v3+ answers only, else none)."""

    txn_offset_commit: int
    offset_fetch: int
    init_producer_id: int
    end_txn: int = -1
    consumer_group_heartbeat: int = -1
    features: tuple[tuple[str, int], ...] = ()
    produce: int = -1

    @property
    def kip447(self) -> bool:
        return self.txn_offset_commit >= 3 and self.offset_fetch >= 7

    @property
    def kip360(self) -> bool:
        return self.init_producer_id >= 3

    def feature(self, name: str) -> int:
        """The finalized max level of feature ``name``; 0 when not finalized."""
        return dict(self.features).get(name, 0)

    @property
    def kip848(self) -> bool:
        """The consumer group protocol: ConsumerGroupHeartbeat (API 68) is served and
        the cluster finalized ``group.version`` >= 1 (a 4.x cluster can turn it off)."""
        return self.consumer_group_heartbeat >= 0 and self.feature("group.version") >= 1

    @property
    def txn_v2(self) -> bool:
        """Transactions v2 (KIP-890 part 2): ``transaction.version`` >= 2 finalized, with
        EndTxn v5 (whose answer carries the bumped epoch), Produce v12 and TxnOffsetCommit
        v5 (which add partitions and groups implicitly)."""
        versions = self.end_txn >= 5 and self.produce >= 12 and self.txn_offset_commit >= 5
        return self.feature("transaction.version") >= 2 and versions

    def describe(self) -> str:
        """One line for the log and the tests: what was found."""
        yes = {True: "yes", False: "no"}
        return (
            f"KIP-447 {yes[self.kip447]}, KIP-360 {yes[self.kip360]}, "
            f"KIP-848 {yes[self.kip848]}, transactions v2 {yes[self.txn_v2]} "
            f"(TxnOffsetCommit v{self.txn_offset_commit}, OffsetFetch v{self.offset_fetch}, "
            f"InitProducerId v{self.init_producer_id}, EndTxn v{self.end_txn}, "
            f"ConsumerGroupHeartbeat v{self.consumer_group_heartbeat}; features "
            + (", ".join(f"{n}={v}" for n, v in self.features) or "none")
            + ")"
        )


_CLIENT = {"client_software_name": "eosflow", "client_software_version": "0"}


async def capabilities(producer: AIOKafkaProducer) -> Capabilities:
    """ApiVersions at the newest version both sides have (v3+ from Kafka 2.4 on carries
    the finalized features), asked of any broker."""
    client = producer.client
    node = client.get_random_node()
    resp = await client.send(node, wire.SpecRequest.of(specs.API_VERSIONS, _CLIENT))
    if resp.error_code:
        raise map_error(error_for(resp.error_code), "ApiVersions")
    top = {key: hi for key, _lo, hi, *_tags in resp.api_versions}
    tags = getattr(resp, "tags", None) or {}
    features = tuple(sorted(wire.finalized_features(tags).items()))
    return Capabilities(
        top.get(28, -1),
        top.get(9, -1),
        top.get(22, -1),
        end_txn=top.get(26, -1),
        consumer_group_heartbeat=top.get(68, -1),
        features=features,
        produce=top.get(0, -1),
    )


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
    req = wire.SpecRequest.of(
        specs.HEARTBEAT,
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
    metadata: Mapping[TopicPartition, str] | None = None,
) -> int:
    """AddOffsetsToTxn then TxnOffsetCommit (v3 with ``ident`` -- generation, member id,
    instance id -- when the broker has it); a producer on transactions v2 sends only
    TxnOffsetCommit, at v5 (the group joins implicitly). Returns 0 or the first Kafka
    error code that is not worth resending; resends coordinator moves,
    CONCURRENT_TRANSACTIONS, timeouts and dropped connections for at most ``timeout_s``
    per request, then raises ``TransientError`` -- the offsets were not committed. A
    refused permission raises ``AuthorizationError`` naming it (READ on the group, or on
    the topics refused)."""
    client = producer.client
    txn_id = transactional_id
    pid, epoch = producer_identity(producer)
    v2 = transactions_v2(producer)
    if not v2:
        code = await _add_offsets(client, txn_id, pid, epoch, group_id, timeout_s)
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
                "committed_metadata": (metadata or {}).get(tp, ""),
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
    # v3 until transactions v2, which takes v5 (the group joins implicitly)
    low, high = (5, 5) if v2 else (None, 3)
    commit = wire.SpecRequest.of(specs.TXN_OFFSET_COMMIT, body, min_version=low, max_version=high)

    def first_error(resp: Any) -> int:
        for topic in resp.to_object()["topics"]:
            for part in topic["partitions"]:
                if part["error_code"]:
                    return int(part["error_code"])
        return 0

    code, resp = await send_retrying(
        client, GROUP_COORDINATOR, group_id, commit, first_error, "TxnOffsetCommit", timeout_s
    )
    if code in AUTHORIZATION:
        # TxnOffsetCommit needs READ on the group and on every topic it commits for;
        # name the topics the broker refused (the answer is per partition)
        refused = {
            t["name"]
            for t in resp.to_object()["topics"]
            if any(p["error_code"] == code for p in t["partitions"])
        }
        raise map_error(error_for(code, refused), "TxnOffsetCommit", "READ")
    return code


async def _add_offsets(
    client: Any, txn_id: str, pid: int, epoch: int, group_id: str, timeout_s: float
) -> int:
    """AddOffsetsToTxn (transactions v1): 0 or the error code; a refusal raises."""
    body = {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch}
    add = wire.SpecRequest.of(specs.ADD_OFFSETS_TO_TXN, {**body, "group_id": group_id})
    code, _ = await send_retrying(
        client, _TRANSACTION, txn_id, add, lambda r: int(r.error_code), "AddOffsetsToTxn", timeout_s
    )
    if code in AUTHORIZATION:
        raise map_error(error_for(code), "AddOffsetsToTxn", "READ")
    return code


# a consumer-protocol member's OffsetFetch v9 answered for a past epoch or a member the
# coordinator does not know (yet): retried with the member's identity read again
_MEMBER_RETRY = frozenset(
    {codes.STALE_MEMBER_EPOCH, codes.UNKNOWN_MEMBER_ID, codes.FENCED_MEMBER_EPOCH}
)


async def fetch_committed(
    consumer: AIOKafkaConsumer,
    group_id: str,
    partitions: list[TopicPartition],
    require_stable: bool,
    timeout_s: float,
    member: Callable[[], tuple[str, int] | None] | None = None,
    metadata: dict[TopicPartition, str] | None = None,
    attempt_s: float | None = None,
) -> dict[TopicPartition, int | None]:
    """Committed offsets of ``partitions`` (None where nothing is committed; their
    metadata into ``metadata`` when given). With
    ``require_stable`` (OffsetFetch v7) a partition held by an open transaction is retried
    until that transaction completes or ``timeout_s`` passes (then TimeoutError).

    Coordinator moves, dropped connections and unanswered requests are resent with a
    growing backoff within ``timeout_s`` too. An attempt waits at most ``attempt_s``
    (default: all the time left) for its answer: a coordinator that stopped answering
    (a stalled broker, whose partitions the controller moves elsewhere) is then looked
    up again instead of waited for until aiokafka's request timeout.

    ``member`` (the consumer protocol) gives the member id and epoch the fetch names
    (OffsetFetch v9, KIP-848), read at each attempt: STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID
    and FENCED_MEMBER_EPOCH are retried with it read again (the heartbeat brings the new
    epoch); when it gives None the membership was lost and ``TransientError`` is raised.
    Without it (the classic protocol) the fetch names no member and nothing is checked."""
    client = consumer._client
    topics: dict[str, list[int]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    asked = [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]
    step = "OffsetFetch"
    deadline = time.monotonic() + timeout_s
    backoff = Backoff()
    last = "no answer"
    while True:
        who: tuple[str | None, int] = (None, -1)
        if member is not None:
            named = member()
            if named is None:
                raise TransientError(step, f"the membership of {group_id} was lost")
            who = named
        body = {
            "group_id": group_id,
            "topics": asked,
            "groups": [
                {"group_id": group_id, "member_id": who[0], "member_epoch": who[1], "topics": asked}
            ],
            "require_stable": require_stable,
        }
        req = wire.SpecRequest.of(specs.OFFSET_FETCH, body, min_version=7 if require_stable else 1)
        left = max(0.0, deadline - time.monotonic())
        try:
            resp = await within(_ask(client, group_id, req), min(left, attempt_s or left))
        except (KafkaError, OSError, TimeoutError) as exc:
            error = map_error(exc, step)
            if not isinstance(error, TransientError):
                raise error from exc
            _forget(client, GROUP_COORDINATOR, group_id)
            cut = isinstance(exc, TimeoutError) and time.monotonic() >= deadline
            last = last if cut and last != "no answer" else error.cause  # the deadline's cut
        else:
            answer = resp  # v8+: per group
            if "groups" in resp:
                answer = next((g for g in resp["groups"] if g["group_id"] == group_id), None)
            if answer is None:
                raise TransientError(step, f"the answer left out group {group_id}")
            out: dict[TopicPartition, int | None] = {}
            meta: dict[TopicPartition, str] = {}
            codes = {answer.get("error_code", 0)}
            for t in answer["topics"]:
                for p in t["partitions"]:
                    codes.add(p["error_code"])
                    off = p["committed_offset"]
                    tp = TopicPartition(t["name"], p["partition_index"])
                    out[tp] = off if off >= 0 else None
                    meta[tp] = p.get("metadata") or ""
            codes.discard(0)
            if not codes:
                if metadata is not None:
                    metadata.update(meta)
                return out
            retried = RETRY_CODES | {UNSTABLE_OFFSET_COMMIT, UNKNOWN_SERVER_ERROR}
            if member is not None:
                retried |= _MEMBER_RETRY
            for code in codes:
                if code not in retried:
                    raise map_error(error_for(code), step)
            if codes & COORDINATOR_ERRORS:
                _forget(client, GROUP_COORDINATOR, group_id)
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
    its KafkaError; what ``send_retrying`` resends is resent for at most ``timeout_s``,
    then ``TransientError``."""
    client = producer.client
    pid, epoch = producer_identity(producer)
    req = wire.SpecRequest.of(
        specs.INIT_PRODUCER_ID,
        {
            "transactional_id": transactional_id,
            "transaction_timeout_ms": int(transaction_timeout_s * 1000),
            "producer_id": pid,
            "producer_epoch": epoch,
        },
        min_version=3,
    )
    # Not on the coordination connection: the EndTxn whose outcome is unknown may still
    # occupy it, and a broker answers one request per connection at a time.
    code, resp = await send_retrying(
        client,
        _TRANSACTION,
        transactional_id,
        req,
        lambda r: int(r.error_code),
        "InitProducerId (KIP-360)",
        timeout_s,
        group=ConnectionGroup.DEFAULT,
    )
    if code:
        raise error_for(code)
    return int(resp.producer_id), int(resp.producer_epoch)


async def _ask(client: Any, group_id: str, req: Any) -> Any:
    """One OffsetFetch attempt: the group's coordinator looked up (cached) and asked."""
    node = await _coordinator(client, GROUP_COORDINATOR, group_id)
    return (await client.send(node, req, group=_COORD)).to_object()


class Backoff:
    """Exponential backoff from 20 ms, doubling to a 1 s cap (as Kafka's clients grow
    ``retry.backoff.ms`` towards ``retry.backoff.max.ms``), never past a deadline."""

    def __init__(self, first_s: float = 0.02, cap_s: float = 1.0) -> None:
        self._next = first_s
        self._cap = cap_s

    async def sleep(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, min(self._next, deadline - time.monotonic())))
        self._next = min(self._next * 2, self._cap)


async def send_retrying(
    client: Any,
    coord_type: int,
    key: str,
    req: Any,
    code_of: Any,
    step: str,
    timeout_s: float,
    group: ConnectionGroup = _COORD,
) -> tuple[int, Any]:
    """Send ``req`` to the coordinator of ``key`` (on connection ``group``) and return its
    error code (0 or one not worth resending) with the answer. Coordinator moves,
    CONCURRENT_TRANSACTIONS, timeouts and dropped connections are resent with a growing
    backoff for at most ``timeout_s``; then ``TransientError`` names ``step`` and the last
    cause. Running out of retries is an
    error, never "no error": a manufactured 0 would commit a transaction without its
    offsets."""
    deadline = time.monotonic() + timeout_s
    backoff = Backoff()
    last = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TransientError(step, f"no usable answer within {timeout_s:g} s (last: {last})")
        try:
            node = await within(_coordinator(client, coord_type, key), remaining)
            resp = await within(client.send(node, req, group=group), remaining)
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
                return code, resp
            if code in COORDINATOR_ERRORS:
                _forget(client, coord_type, key)
            last = error_name(code)
        await backoff.sleep(deadline)
