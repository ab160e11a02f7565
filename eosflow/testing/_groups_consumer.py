"""The consumer group protocol's coordinator in the test cluster (KIP-848, Kafka 4.0+ where
``group.version`` >= 1), after Kafka's GroupMetadataManager and CurrentAssignmentBuilder.

- **Group epoch and target.** A group's epoch is bumped when a member joins, leaves or is
  removed, changes its subscription, or a subscribed topic's partition count changes; at
  each new epoch the server-side assignor (``uniform``, sticky and balanced, or ``range``)
  computes the target assignment of every member.
- **Reconciliation, one member at a time.** A member moves towards its target at its own
  heartbeats. Partitions it must give up are taken out of its assignment and held *pending
  revocation*; its epoch stays until a heartbeat's owned partitions (non-null) no longer
  list them -- the acknowledgement. Then it takes the target epoch and every target
  partition that no other member holds (assigned or pending revocation); the rest wait
  (*unreleased*) and come with a later heartbeat once their owner lets go. So a partition
  is never assigned to two members at once, and members whose partitions do not move keep
  working through another member's join.
- **Epochs and fencing.** A heartbeat's epoch must be the member's, or its previous one
  with owned partitions that its assignment contains (the answer that bumped it may have
  been lost); otherwise FENCED_MEMBER_EPOCH, and the member stays as it was. Epoch 0 joins:
  a new member, or a known one rejoining (after a fence, say), which keeps its epoch and
  assignment and is sent them (genuine 4.4.0 answers so); -1 leaves (the member is
  removed), -2 leaves a static member for now (it keeps its partitions, epoch -2, until
  its session ends; a join with its instance id takes its place and assignment). An
  unknown member: UNKNOWN_MEMBER_ID; an unknown group (epoch other than 0):
  GROUP_ID_NOT_FOUND; a live static member's instance id: UNRELEASED_INSTANCE_ID; a
  static member replaced by another member id: FENCED_INSTANCE_ID.
- **Timeouts.** A member not heard from for ``consumer_session_timeout_s`` is removed; one
  holding partitions pending revocation past its rebalance timeout is removed too.
- **Offsets.** A TxnOffsetCommit or OffsetCommit naming a member checks it: unknown
  member UNKNOWN_MEMBER_ID, an epoch other than the member's ILLEGAL_GENERATION (at the
  versions modelled; newer ones say STALE_MEMBER_EPOCH). An OffsetFetch v9 naming a
  member checks it the same way, a wrong epoch being STALE_MEMBER_EPOCH there.

Not modelled: regular-expression subscriptions (v1 ``subscribed_topic_regex``), racks,
and online migration between the classic and the consumer protocol (a group in use by
one protocol answers the other with GROUP_ID_NOT_FOUND / INCONSISTENT_GROUP_PROTOCOL).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._protocol import codes
from .._records import Partition
from ._groups import (
    MEMBER_STABLE,
    MEMBER_UNRELEASED,
    MEMBER_UNREVOKED,
    ConsumerGroupState,
    ConsumerMember,
    Group,
    GroupCoordinator,
    GroupError,
)

ASSIGNORS = ("uniform", "range")  # Kafka's order: the first is the default
LEAVE, LEAVE_STATIC = -1, -2


@dataclass(frozen=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat request, topic ids already turned into names (``owned``
    None: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    epoch: int
    instance_id: str | None
    rebalance_timeout_ms: int
    topics: list[str] | None
    assignor: str | None
    owned: set[Partition] | None
    client_id: str = ""
    client_host: str = ""


class ConsumerGroups:
    """The consumer-protocol side of the group coordinator; ``topics`` gives each topic's
    partition count now."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        topics: Callable[[], dict[str, int]],
        session_timeout_s: float,
        heartbeat_interval_s: float,
    ) -> None:
        self.coordinator = coordinator
        self.topics = topics
        self.session_timeout_s = session_timeout_s
        self.heartbeat_interval_s = heartbeat_interval_s

    def heartbeat(self, hb: Heartbeat, version: int) -> dict[str, Any]:
        """The answer's member id, epoch, heartbeat interval and assignment (partitions;
        None when not sent); raises ``GroupError`` for an error answer."""
        _validate(hb, version)
        s = self._state(hb)
        member_id = hb.member_id or str(uuid.uuid4())  # v0: the coordinator makes the id
        if hb.epoch in (LEAVE, LEAVE_STATIC):
            return self._leave(s, hb, member_id)
        m = self._member(s, hb, member_id)
        before = set(m.assigned)
        m.last_seen = time.monotonic()
        if hb.rebalance_timeout_ms != -1:
            m.rebalance_timeout_s = hb.rebalance_timeout_ms / 1000
        if hb.assignor is not None:
            m.assignor = hb.assignor
        changed = False  # a new member changes the group through its subscription
        if hb.topics is not None and tuple(sorted(hb.topics)) != m.topics:
            m.topics, changed = tuple(sorted(hb.topics)), True
        s.members[member_id] = m
        if m.instance_id is not None:
            s.instances[m.instance_id] = member_id
        counts = {t: n for t, n in self.topics().items() if self._subscribed(s, t)}
        if counts != s.partition_counts:
            s.partition_counts, changed = counts, True
        if changed or s.epoch == 0:
            self._bump(s)
        self._reconcile(s, m, hb.owned)
        full = hb.epoch == 0 or (
            hb.rebalance_timeout_ms != -1 and hb.topics is not None and hb.owned is not None
        )
        return {
            "member_id": member_id,
            "member_epoch": m.epoch,
            "heartbeat_interval_ms": int(self.heartbeat_interval_s * 1000),
            "assignment": set(m.assigned) if full or m.assigned != before else None,
        }

    # --- membership ---------------------------------------------------------------------

    def _state(self, hb: Heartbeat) -> ConsumerGroupState:
        g: Group | None = self.coordinator.groups.get(hb.group_id)
        if g is not None and g.modern is None and g.members:
            raise GroupError(codes.GROUP_ID_NOT_FOUND)  # a classic group in use
        if g is None or g.modern is None:
            if hb.epoch != 0:
                raise GroupError(codes.GROUP_ID_NOT_FOUND)
            g = self.coordinator.group(hb.group_id)
            g.modern = ConsumerGroupState()
        return g.modern

    def _member(self, s: ConsumerGroupState, hb: Heartbeat, member_id: str) -> ConsumerMember:
        if hb.instance_id is not None:
            holder = s.instances.get(hb.instance_id)
            if holder is not None and holder != member_id:
                old = s.members[holder]
                if hb.epoch != 0:
                    raise GroupError(codes.FENCED_INSTANCE_ID)
                if old.epoch != LEAVE_STATIC:
                    raise GroupError(codes.UNRELEASED_INSTANCE_ID)
                # the rejoining static member takes the place, partitions and target of
                # the old one: no new group epoch (genuine 4.4.0 answers it them at once)
                del s.members[holder]
                s.target[member_id] = s.target.pop(holder, set())
                return ConsumerMember(
                    member_id,
                    hb.instance_id,
                    old.rebalance_timeout_s,
                    old.topics,
                    old.assignor,
                    epoch=old.previous_epoch,
                    previous_epoch=old.previous_epoch,
                    assigned=old.assigned,
                    revoking=old.revoking,
                    state=old.state,
                    client_id=hb.client_id,
                    client_host=hb.client_host,
                )
        m = s.members.get(member_id)
        if m is None:
            if hb.epoch != 0:
                raise GroupError(codes.UNKNOWN_MEMBER_ID)
            return ConsumerMember(
                member_id, hb.instance_id, client_id=hb.client_id, client_host=hb.client_host
            )
        if hb.epoch == 0:
            return m  # rejoining (after a fence, say): it keeps its place, as 4.4.0 answers
        if hb.epoch > m.epoch or (
            hb.epoch < m.epoch
            and (hb.epoch != m.previous_epoch or hb.owned is None or not hb.owned <= m.assigned)
        ):
            raise GroupError(codes.FENCED_MEMBER_EPOCH)
        return m

    def _leave(self, s: ConsumerGroupState, hb: Heartbeat, member_id: str) -> dict[str, Any]:
        if hb.epoch == LEAVE_STATIC and hb.instance_id is not None:
            holder = s.instances.get(hb.instance_id)
            if holder is None:
                raise GroupError(codes.UNKNOWN_MEMBER_ID)
            if holder != member_id:
                raise GroupError(codes.FENCED_INSTANCE_ID)
            m = s.members[holder]
            m.previous_epoch, m.epoch = m.epoch, LEAVE_STATIC  # keeps its partitions for now
            m.last_seen = time.monotonic()
        else:
            if member_id not in s.members:
                raise GroupError(codes.UNKNOWN_MEMBER_ID)
            self.remove(s, member_id)
        return {
            "member_id": member_id,
            "member_epoch": hb.epoch,
            "heartbeat_interval_ms": 0,
            "assignment": None,
        }

    def remove(self, s: ConsumerGroupState, member_id: str) -> None:
        m = s.members.pop(member_id, None)
        if m is None:
            return
        if m.instance_id is not None and s.instances.get(m.instance_id) == member_id:
            del s.instances[m.instance_id]
        s.target.pop(member_id, None)
        self._bump(s)

    def expire(self) -> list[str]:
        """Remove members whose session ended, or whose revocation outlasted their
        rebalance timeout; returns their member ids."""
        now = time.monotonic()
        gone: list[str] = []
        for g in list(self.coordinator.groups.values()):
            s = g.modern
            if s is None:
                continue
            for mid, m in list(s.members.items()):
                late = (
                    m.state == MEMBER_UNREVOKED and now - m.revoking_since > m.rebalance_timeout_s
                )
                if now - m.last_seen > self.session_timeout_s or late:
                    gone.append(mid)
                    self.remove(s, mid)
        return gone

    # --- assignment ---------------------------------------------------------------------

    def _subscribed(self, s: ConsumerGroupState, topic: str) -> bool:
        return any(topic in m.topics for m in s.members.values())

    def _bump(self, s: ConsumerGroupState) -> None:
        s.epoch += 1
        s.partition_counts = {t: n for t, n in self.topics().items() if self._subscribed(s, t)}
        assignor = next((m.assignor for m in s.members.values() if m.assignor), ASSIGNORS[0])
        assign = _range if assignor == "range" else _uniform
        s.target = assign(s.members, s.partition_counts, s.target)
        s.assignment_epoch = s.epoch
        self.coordinator.on_change()

    def _reconcile(
        self, s: ConsumerGroupState, m: ConsumerMember, owned: set[Partition] | None
    ) -> None:
        """One step of Kafka's CurrentAssignmentBuilder for ``m``."""
        if m.state == MEMBER_UNREVOKED and (owned is None or owned & m.revoking):
            return  # it still owns what it must give up
        if m.state == MEMBER_STABLE and m.epoch == s.assignment_epoch:
            return
        target = {tp for tp in s.target.get(m.member_id, set()) if tp[0] in m.topics}
        keep = m.assigned & target
        revoke = m.assigned - keep
        if revoke and (owned is None or owned & revoke):
            m.state, m.assigned, m.revoking = MEMBER_UNREVOKED, keep, revoke
            m.revoking_since = time.monotonic()
            return
        wanted = target - keep
        unreleased = {tp for tp in wanted if s.holder(tp, m)}
        m.assigned, m.revoking = keep | (wanted - unreleased), set()
        m.move_to(s.assignment_epoch)
        m.state = MEMBER_UNRELEASED if unreleased else MEMBER_STABLE


def _validate(hb: Heartbeat, version: int) -> None:
    if not hb.group_id:
        raise GroupError(codes.INVALID_REQUEST)
    if not hb.member_id and (version >= 1 or hb.epoch > 0 or hb.epoch == LEAVE):
        raise GroupError(codes.INVALID_REQUEST)
    if hb.epoch == 0:
        if hb.rebalance_timeout_ms == -1 or hb.owned is None or hb.owned or hb.topics is None:
            raise GroupError(codes.INVALID_REQUEST)
    elif (hb.epoch == LEAVE_STATIC and hb.instance_id is None) or hb.epoch < LEAVE_STATIC:
        raise GroupError(codes.INVALID_REQUEST)
    if hb.assignor is not None and hb.assignor not in ASSIGNORS:
        raise GroupError(codes.UNSUPPORTED_ASSIGNOR)


def _uniform(
    members: dict[str, ConsumerMember],
    counts: dict[str, int],
    previous: dict[str, set[Partition]],
) -> dict[str, set[Partition]]:
    """Balanced and sticky: each partition goes to a member subscribed to its topic; a
    member keeps what it had up to its fair share, the rest goes to the least loaded."""
    out: dict[str, set[Partition]] = {mid: set() for mid in members}
    parts = [(t, p) for t in sorted(counts) for p in range(counts[t])]
    share = -(-len(parts) // max(len(members), 1))  # the ceiling
    taken: set[Partition] = set()
    for mid in sorted(members):
        for tp in sorted(previous.get(mid, set())):
            if tp in parts and tp[0] in members[mid].topics and len(out[mid]) < share:
                if tp not in taken:
                    out[mid].add(tp)
                    taken.add(tp)
    for tp in parts:
        if tp in taken:
            continue
        eligible = [mid for mid in sorted(members) if tp[0] in members[mid].topics]
        if eligible:
            out[min(eligible, key=lambda mid: len(out[mid]))].add(tp)
    return out


def _range(
    members: dict[str, ConsumerMember],
    counts: dict[str, int],
    previous: dict[str, set[Partition]],
) -> dict[str, set[Partition]]:
    """Per topic, its subscribers in member-id order take contiguous ranges, the first
    ones one partition more when the count does not divide."""
    out: dict[str, set[Partition]] = {mid: set() for mid in members}
    for topic, n in counts.items():
        subs = sorted(mid for mid, m in members.items() if topic in m.topics)
        if not subs:
            continue
        base, extra = divmod(n, len(subs))
        start = 0
        for i, mid in enumerate(subs):
            size = base + (1 if i < extra else 0)
            out[mid].update((topic, p) for p in range(start, start + size))
            start += size
    return out
