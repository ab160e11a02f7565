"""The classic consumer-group coordinator of the test cluster.

States follow Kafka's GroupCoordinator: Empty -> PreparingRebalance -> CompletingRebalance
-> Stable, with generations, leader-side assignment, heartbeats that answer
REBALANCE_IN_PROGRESS while a rebalance is being prepared, eviction of a member whose
session times out, a rebalance timeout for members that do not rejoin, static membership
(group.instance.id: a new member id fences the old one with FENCED_INSTANCE_ID), and
committed offsets with generation checks.

Transactional offsets (TxnOffsetCommit) are kept per transaction as *pending* until the
transaction coordinator completes the transaction: then they are applied (commit) or
dropped (abort). While any transaction holds a pending offset for a partition, a stable
OffsetFetch (v7 RequireStable) answers UNSTABLE_OFFSET_COMMIT for it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._protocol import codes
from .._records import Partition

EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"


class GroupError(Exception):
    """A request fails with ``code``; raised inside the coordinator, answered as data."""

    def __init__(self, code: int, member_id: str = "") -> None:
        super().__init__(code)
        self.code = code
        self.member_id = member_id


@dataclass(eq=False)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_fut: asyncio.Future[dict[str, Any]] | None = None
    sync_fut: asyncio.Future[bytes] | None = None
    last_seen: float = field(default_factory=time.monotonic)

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass(eq=False)
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)
    pending_ids: set[str] = field(default_factory=set)
    offsets: dict[Partition, tuple[int, str | None]] = field(default_factory=dict)
    # transaction token -> offsets that transaction committed but has not completed
    pending_txn: dict[int, dict[Partition, tuple[int, str | None]]] = field(default_factory=dict)
    # what a coordinator that lost the group while stopped answers from its cache: the
    # offsets it last held, for the next ``stale_answers`` stable fetches
    # (``FakeCluster.stale_offsets``)
    stale: dict[Partition, tuple[int, str | None]] = field(default_factory=dict)
    stale_answers: int = 0
    rebalance_timer: asyncio.TimerHandle | None = None
    # the consumer protocol's membership (KIP-848, ``_groups_consumer``); None: classic
    modern: ConsumerGroupState | None = None


@dataclass(frozen=True)
class GroupSettings:
    min_session_timeout_s: float = 6.0
    max_session_timeout_s: float = 1800.0
    initial_rebalance_delay_s: float = 0.0
    # the consumer protocol's (KIP-848): set by the broker, not the member
    consumer_session_timeout_s: float = 45.0
    consumer_heartbeat_interval_s: float = 5.0


class GroupCoordinator:
    def __init__(self, settings: GroupSettings) -> None:
        self.settings = settings
        self.groups: dict[str, Group] = {}
        self.on_change: Callable[[], None] = lambda: None

    def get(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        return g

    # --- membership ------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_s: float,
        rebalance_timeout_s: float,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
    ) -> dict[str, Any]:
        s = self.settings
        if not s.min_session_timeout_s <= session_timeout_s <= s.max_session_timeout_s:
            raise GroupError(codes.INVALID_SESSION_TIMEOUT)
        if member_id and group_id not in self.groups:  # Kafka creates no group for it
            raise GroupError(codes.UNKNOWN_MEMBER_ID, member_id)
        g = self.group(group_id)
        if g.modern is not None and g.modern.members:  # no online migration modelled
            raise GroupError(codes.INCONSISTENT_GROUP_PROTOCOL)
        g.modern = None  # an empty group changes protocol with its first member
        if g.members and g.protocol_type not in (None, protocol_type):
            raise GroupError(codes.INCONSISTENT_GROUP_PROTOCOL)
        names = {p for p, _ in protocols}
        if g.members and not all(names & {p for p, _ in m.protocols} for m in g.members.values()):
            raise GroupError(codes.INCONSISTENT_GROUP_PROTOCOL)

        if not member_id:
            member_id = f"{client_id}-{uuid.uuid4()}"
            if instance_id is not None:
                old = g.instances.get(instance_id)
                if old is not None:
                    self._remove(g, old, codes.FENCED_INSTANCE_ID)
                g.instances[instance_id] = member_id
            elif require_known_member_id:
                g.pending_ids.add(member_id)
                raise GroupError(codes.MEMBER_ID_REQUIRED, member_id)
        else:
            if instance_id is not None and g.instances.get(instance_id) not in (None, member_id):
                raise GroupError(codes.FENCED_INSTANCE_ID)
            if member_id not in g.members and member_id not in g.pending_ids:
                raise GroupError(codes.UNKNOWN_MEMBER_ID, member_id)
            if instance_id is not None:
                g.instances[instance_id] = member_id
        g.pending_ids.discard(member_id)

        member = g.members.get(member_id)
        if member is None:
            member = Member(
                member_id,
                instance_id,
                client_id,
                client_host,
                session_timeout_s,
                rebalance_timeout_s,
                protocols,
            )
            g.members[member_id] = member
        else:
            member.protocols = protocols
            member.session_timeout_s = session_timeout_s
            member.rebalance_timeout_s = rebalance_timeout_s
        g.protocol_type = protocol_type
        loop = asyncio.get_running_loop()
        if member.join_fut is not None and not member.join_fut.done():
            member.join_fut.set_exception(GroupError(codes.UNKNOWN_MEMBER_ID))
        member.join_fut = loop.create_future()
        member.last_seen = time.monotonic()
        if g.state != PREPARING:
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return await member.join_fut

    def _prepare_rebalance(self, g: Group) -> None:
        if g.state == COMPLETING:
            for m in g.members.values():
                if m.sync_fut is not None and not m.sync_fut.done():
                    m.sync_fut.set_exception(GroupError(codes.REBALANCE_IN_PROGRESS))
        was_empty = g.state == EMPTY
        g.state = PREPARING
        loop = asyncio.get_running_loop()
        timeout = max((m.rebalance_timeout_s for m in g.members.values()), default=0.0)
        if was_empty and self.settings.initial_rebalance_delay_s > 0:
            timeout = self.settings.initial_rebalance_delay_s
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()
        g.rebalance_timer = loop.call_later(timeout, self._complete_join, g)
        self.on_change()

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state != PREPARING:
            return
        if was_delayed(g, self.settings):
            return
        if all(m.join_fut is not None and not m.join_fut.done() for m in g.members.values()):
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        if g.state != PREPARING:
            return
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()
            g.rebalance_timer = None
        for mid in [mid for mid, m in g.members.items() if m.join_fut is None or m.join_fut.done()]:
            self._remove(g, mid, codes.UNKNOWN_MEMBER_ID, rebalance=False)
        g.generation += 1
        if not g.members:
            g.state, g.protocol, g.leader, g.protocol_type = EMPTY, None, None, None
            self.on_change()
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        leader = g.members[g.leader]
        common = set.intersection(*({p for p, _ in m.protocols} for m in g.members.values()))
        g.protocol = next(p for p, _ in leader.protocols if p in common)
        g.state = COMPLETING
        now = time.monotonic()
        all_members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "member_metadata": m.metadata_for(g.protocol),
            }
            for m in g.members.values()
        ]
        for m in g.members.values():
            m.last_seen = now
            assert m.join_fut is not None
            m.join_fut.set_result(
                {
                    "error_code": codes.NONE,
                    "generation_id": g.generation,
                    "group_protocol": g.protocol,
                    "leader_id": g.leader,
                    "member_id": m.member_id,
                    "members": all_members if m.member_id == g.leader else [],
                }
            )
        self.on_change()

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: list[tuple[str, bytes]],
    ) -> bytes:
        g = self.groups.get(group_id)
        if g is None:
            raise GroupError(codes.UNKNOWN_MEMBER_ID)
        m = self._check_member(g, member_id, instance_id, generation)
        if g.state == PREPARING:
            raise GroupError(codes.REBALANCE_IN_PROGRESS)
        if g.state == STABLE:
            return m.assignment
        m.sync_fut = asyncio.get_running_loop().create_future()
        m.last_seen = time.monotonic()
        if member_id == g.leader:
            given = dict(assignments)
            for other in g.members.values():
                other.assignment = given.get(other.member_id, b"")
            g.state = STABLE
            for other in g.members.values():
                if other.sync_fut is not None and not other.sync_fut.done():
                    other.sync_fut.set_result(other.assignment)
            self.on_change()
        return await m.sync_fut

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> int:
        g = self.groups.get(group_id)
        if g is None:
            return codes.UNKNOWN_MEMBER_ID
        try:
            m = self._check_member(g, member_id, instance_id, generation)
        except GroupError as e:
            return e.code
        m.last_seen = time.monotonic()
        if g.state == PREPARING:
            return codes.REBALANCE_IN_PROGRESS
        return codes.NONE

    def leave(self, group_id: str, member_id: str) -> int:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return codes.UNKNOWN_MEMBER_ID
        self._remove(g, member_id, codes.UNKNOWN_MEMBER_ID)
        return codes.NONE

    def _check_committer(
        self, g: Group, member_id: str, instance_id: str | None, generation: int
    ) -> None:
        """An offset commit's member check, by the protocol the group is in use with."""
        if g.modern is not None and g.modern.members:
            g.modern.check_member(member_id, generation)
        else:
            self._check_member(g, member_id, instance_id, generation)

    def _check_member(
        self, g: Group, member_id: str, instance_id: str | None, generation: int
    ) -> Member:
        if g.modern is not None:
            raise GroupError(codes.UNKNOWN_MEMBER_ID)  # a classic request to a consumer group
        if instance_id is not None and g.instances.get(instance_id) not in (None, member_id):
            raise GroupError(codes.FENCED_INSTANCE_ID)
        m = g.members.get(member_id)
        if m is None:
            raise GroupError(codes.UNKNOWN_MEMBER_ID)
        if generation != g.generation:
            raise GroupError(codes.ILLEGAL_GENERATION)
        return m

    def _remove(self, g: Group, member_id: str, code: int, rebalance: bool = True) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        if m.instance_id is not None and g.instances.get(m.instance_id) == member_id:
            del g.instances[m.instance_id]
        for fut in (m.join_fut, m.sync_fut):
            if fut is not None and not fut.done():
                fut.set_exception(GroupError(code))
        if g.leader == member_id:
            g.leader = None
        if not rebalance:
            return
        if g.state in (STABLE, COMPLETING):
            self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        if g.state == PREPARING and not g.members:
            self._complete_join(g)

    def expire_sessions(self) -> list[str]:
        """Evict members whose session timed out; returns their member ids."""
        now = time.monotonic()
        expired: list[str] = []
        for g in list(self.groups.values()):
            for mid, m in list(g.members.items()):
                waiting = m.join_fut is not None and not m.join_fut.done()
                if not waiting and now - m.last_seen > m.session_timeout_s:
                    expired.append(mid)
                    self._remove(g, mid, codes.UNKNOWN_MEMBER_ID)
        return expired

    def expire_member(self, group_id: str, member_id: str | None = None) -> list[str]:
        """Evict one member (or every member) of a group now, as a session timeout would."""
        g = self.groups.get(group_id)
        if g is None:
            return []
        victims = [member_id] if member_id is not None else list(g.members)
        for mid in victims:
            self._remove(g, mid, codes.UNKNOWN_MEMBER_ID)
        return victims

    def force_rebalance(self, group_id: str) -> None:
        g = self.groups.get(group_id)
        if g is not None and g.state in (STABLE, COMPLETING):
            self._prepare_rebalance(g)

    # --- offsets -----------------------------------------------------------------------

    def commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[Partition, tuple[int, str | None]],
    ) -> int:
        g = self.groups.get(group_id)
        if g is None:
            if generation >= 0:
                return codes.ILLEGAL_GENERATION
            g = self.group(group_id)
        in_use = g.state != EMPTY or (g.modern is not None and bool(g.modern.members))
        if generation < 0 and not member_id and not in_use:
            g.offsets.update(offsets)
            return codes.NONE
        try:
            self._check_committer(g, member_id, instance_id, generation)
        except GroupError as e:
            return e.code
        if g.state in (PREPARING, COMPLETING):
            return codes.REBALANCE_IN_PROGRESS
        g.offsets.update(offsets)
        return codes.NONE

    def txn_commit(
        self,
        group_id: str,
        token: int,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[Partition, tuple[int, str | None]],
    ) -> int:
        """Stage offsets of transaction ``token``; KIP-447 checks when the request carries
        a generation, member id or instance id (v3), none for the v0-v2 defaults."""
        g = self.group(group_id)
        if generation >= 0 or member_id or instance_id is not None:
            try:
                self._check_committer(g, member_id, instance_id, generation)
            except GroupError as e:
                return e.code
        g.pending_txn.setdefault(token, {}).update(offsets)
        return codes.NONE

    def complete_txn(self, group_id: str, token: int, commit: bool) -> None:
        g = self.groups.get(group_id)
        if g is None:
            return
        staged = g.pending_txn.pop(token, None)
        if commit and staged:
            g.offsets.update(staged)

    def fetch(
        self,
        group_id: str,
        partitions: list[Partition] | None,
        require_stable: bool,
        member: tuple[str | None, int] = (None, -1),
    ) -> list[tuple[Partition, int, str | None, int]]:
        """(partition, offset, metadata, error code) for each requested partition.
        ``None`` asks for all, as Kafka answers it: every partition with a committed
        offset; one holding only a staged transactional offset is not listed. A
        ``member`` (id, epoch; OffsetFetch v9) of a consumer-protocol group is checked:
        ``GroupError`` UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH; (None, -1) is not."""
        g = self.groups.get(group_id)
        member_id, epoch = member
        if g is not None and g.modern is not None and (member_id is not None or epoch >= 0):
            g.modern.check_member(member_id or "", epoch, stale=codes.STALE_MEMBER_EPOCH)
        if g is None:
            return [(tp, -1, "", codes.NONE) for tp in partitions or []]
        wanted = partitions if partitions is not None else list(g.offsets)
        if g.stale_answers > 0 and require_stable:
            g.stale_answers -= 1
            return [(tp, *g.stale.get(tp, (-1, "")), codes.NONE) for tp in wanted]
        unstable: set[Partition] = set()
        if require_stable:
            for staged in g.pending_txn.values():
                unstable.update(staged)
        out: list[tuple[Partition, int, str | None, int]] = []
        for tp in wanted:
            if tp in unstable:
                out.append((tp, -1, "", codes.UNSTABLE_OFFSET_COMMIT))
            else:
                offset, meta = g.offsets.get(tp, (-1, ""))
                out.append((tp, offset, meta, codes.NONE))
        return out


def was_delayed(g: Group, settings: GroupSettings) -> bool:
    """Whether a first join into an empty group is still inside the initial delay."""
    return settings.initial_rebalance_delay_s > 0 and g.generation == 0


# --- the consumer group protocol's state (KIP-848), held by a ``Group`` as ``modern``;
# its coordinator is ``_groups_consumer``

# a member's reconciliation state (KIP-848), not a group's (``STABLE`` above is the classic
# group state "Stable")
MEMBER_STABLE, MEMBER_UNREVOKED, MEMBER_UNRELEASED = (
    "stable",
    "unrevoked_partitions",
    "unreleased_partitions",
)


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rebalance_timeout_s: float = 0.0
    topics: tuple[str, ...] = ()
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: str = MEMBER_STABLE
    assigned: set[Partition] = field(default_factory=set)
    revoking: set[Partition] = field(default_factory=set)
    revoking_since: float = 0.0
    last_seen: float = field(default_factory=time.monotonic)
    client_id: str = ""
    client_host: str = ""

    def move_to(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.previous_epoch, self.epoch = self.epoch, epoch


@dataclass(eq=False)
class ConsumerGroupState:
    """What a group holds under the consumer protocol (beside ``Group``'s offsets)."""

    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, set[Partition]] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    partition_counts: dict[str, int] = field(default_factory=dict)

    def check_member(
        self, member_id: str, epoch: int, stale: int = codes.ILLEGAL_GENERATION
    ) -> None:
        """An offset request's member check (KIP-848): the member and its current epoch,
        any other epoch answered ``stale``. For commits that is ILLEGAL_GENERATION at the
        versions the test cluster decodes (TxnOffsetCommit v0-3, OffsetCommit v0-3), as
        genuine 4.4.0 answers TxnOffsetCommit v3; OffsetFetch v9 says STALE_MEMBER_EPOCH
        for a past or a future epoch alike (genuine 4.4.0)."""
        m = self.members.get(member_id)
        if m is None:
            raise GroupError(codes.UNKNOWN_MEMBER_ID)
        if epoch != m.epoch:
            raise GroupError(stale)

    def holder(self, tp: Partition, other_than: ConsumerMember) -> bool:
        return any(
            tp in m.assigned or tp in m.revoking
            for m in self.members.values()
            if m is not other_than
        )
