"""The group coordinator's APIs: JoinGroup, SyncGroup, Heartbeat, LeaveGroup (the classic
protocol, ``_groups``), ConsumerGroupHeartbeat and ConsumerGroupDescribe (the consumer
protocol, ``_groups_consumer``), OffsetCommit, OffsetFetch, DescribeGroups, ListGroups."""

from __future__ import annotations

from .._protocol import codes
from .._records import Partition
from ._api import Body, by_topic, handles, sorted_out, tp_offsets
from ._broker import Broker
from ._codec import Frame
from ._groups import MEMBER_STABLE, GroupError
from ._groups_consumer import Heartbeat


@handles("JoinGroup")
async def join_group(c: Broker, f: Frame, host: str) -> Body:
    """Kafka's classic join (``_groups``): answers once every known member has rejoined or
    the rebalance timeout (v0: the session timeout) has passed. From v4 a first join without a
    member id gets MEMBER_ID_REQUIRED and its id (KIP-394), unless static (v5 instance id).
    INVALID_SESSION_TIMEOUT outside ``GroupSettings``' bounds, INCONSISTENT_GROUP_PROTOCOL,
    UNKNOWN_MEMBER_ID (the id echoed; a missing group is not created), FENCED_INSTANCE_ID;
    an error carries generation -1 and an empty protocol. Versions: v0-5."""
    b = f.body
    session = b["session_timeout"] / 1000
    try:
        return await c.groups.join(
            b["group"],
            b["member_id"],
            b.get("group_instance_id"),
            b["protocol_type"],
            [(p["protocol_name"], p["protocol_metadata"]) for p in b["group_protocols"]],
            session,
            b.get("rebalance_timeout", b["session_timeout"]) / 1000,
            f.client_id or "",
            host,
            require_known_member_id=f.version >= 4,
        )
    except GroupError as e:
        return {
            "error_code": e.code,
            "generation_id": -1,
            "group_protocol": "",  # not nullable before v7
            "leader_id": "",
            "member_id": e.member_id,
            "members": [],
        }


@handles("SyncGroup")
async def sync_group(c: Broker, f: Frame, host: str) -> Body:
    """The leader's SyncGroup hands every member its assignment and makes the group Stable;
    followers wait for it, and once Stable a SyncGroup gets its assignment at once.
    UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID (v3 instance id),
    REBALANCE_IN_PROGRESS when a rebalance is being prepared or starts meanwhile; an error
    carries an empty assignment. Versions: v0-3."""
    b = f.body
    try:
        assignment = await c.groups.sync(
            b["group"],
            b["generation_id"],
            b["member_id"],
            b.get("group_instance_id"),
            [(a["member_id"], a["member_metadata"]) for a in b["group_assignment"]],
        )
    except GroupError as e:
        return {"error_code": e.code, "member_assignment": b""}
    return {"error_code": 0, "member_assignment": assignment}


@handles("Heartbeat")
async def heartbeat(c: Broker, f: Frame, host: str) -> Body:
    """Keeps the member's session alive. UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION or
    FENCED_INSTANCE_ID (v3+ instance id) when the member checks fail, else
    REBALANCE_IN_PROGRESS while a rebalance is being prepared. A session that lapses is
    expired by the cluster's sweep (``session_check_interval_s``). Versions: v0-4."""
    b = f.body
    code = c.groups.heartbeat(
        b["group_id"], b["generation_id"], b["member_id"], b.get("group_instance_id")
    )
    return {"error_code": code}


@handles("LeaveGroup")
async def leave_group(c: Broker, f: Frame, host: str) -> Body:
    """Removes the one member named (v0-1 carry a single member id) and rebalances the group
    without it; UNKNOWN_MEMBER_ID for a group or member the coordinator does not hold.
    Versions: v0-1."""
    return {"error_code": c.groups.leave(f.body["group"], f.body["member_id"])}


@handles("ConsumerGroupHeartbeat")
async def consumer_group_heartbeat(c: Broker, f: Frame, host: str) -> Body:
    """The consumer group protocol (KIP-848): join (epoch 0), heartbeat, acknowledge a
    revocation by leaving partitions out of ``topic_partitions``, leave (-1; -2 static);
    server-side assignment and reconciliation as ``_groups_consumer`` describes. Owned
    partitions of a topic id that no longer exists are ignored. An error answer carries
    the code, its name as the message, a null member id and epoch 0; the assignment goes
    by topic id, only when the request was full or the assignment changed. Not advertised
    by profiles "2.4" and "2.5". Versions: v0-1 (v1: the member makes its id)."""
    b = f.body
    owned: set[Partition] | None = None
    if b.get("topic_partitions") is not None:
        owned = set()
        for t in b["topic_partitions"]:
            name = c.topic_name(t["topic_id"])
            if name is not None:
                owned.update((name, p) for p in t["partitions"])
    hb = Heartbeat(
        group_id=b["group_id"],
        member_id=b["member_id"],
        epoch=b["member_epoch"],
        instance_id=b.get("instance_id"),
        rebalance_timeout_ms=b["rebalance_timeout_ms"],
        topics=b.get("subscribed_topic_names"),
        assignor=b.get("server_assignor"),
        owned=owned,
        client_id=f.client_id or "",
        client_host=host,
    )
    try:
        out = c.consumer_groups.heartbeat(hb, f.version)
    except GroupError as e:
        return {"error_code": e.code, "error_message": codes.name(e.code), "member_id": None}
    assigned = out.pop("assignment")
    if assigned is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, part in sorted(assigned):
            by_topic.setdefault(topic, []).append(part)
        out["assignment"] = {
            "topic_partitions": [
                {"topic_id": c.topic_ids[t], "partitions": ps} for t, ps in by_topic.items()
            ]
        }
    return {"error_code": 0, **out}


@handles("OffsetCommit")
async def offset_commit(c: Broker, f: Frame, host: str) -> Body:
    """Generation -1 and no member id on an Empty or new group: stored without checks (a
    consumer outside group management). Otherwise UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION (also
    for a group that does not exist), REBALANCE_IN_PROGRESS during a rebalance; the answer
    applies to every partition, UNKNOWN_TOPIC_OR_PARTITION to those that do not exist,
    OFFSET_METADATA_TOO_LARGE to metadata over 4096 characters (neither committed). Null
    metadata is stored as "". Versions: v0-3; profile "4.0" v2-3 (KIP-896 floor)."""
    b = f.body
    offsets = tp_offsets(b["topics"])
    taken, refused = sorted_out(offsets, lambda tp: c.log(tp) is not None)
    code = c.groups.commit(
        b["consumer_group"],
        b.get("consumer_group_generation_id", -1),
        b.get("consumer_id", ""),
        b.get("group_instance_id"),
        taken,
    )
    results = {tp: refused.get(tp, code) for tp in offsets}
    return {"topics": by_topic(results, "topic", "partitions", "partition")}


@handles("OffsetFetch")
async def offset_fetch(c: Broker, f: Frame, host: str) -> Body:
    """The committed offset and metadata per partition, -1 and no error where there is none.
    Null topics (v2+) asks for every partition with a committed offset. RequireStable (v7,
    KIP-447): UNSTABLE_OFFSET_COMMIT for a partition holding a transaction's pending offset;
    committed transactional offsets show ``offset_lag_s`` after EndTxn (docs/design.md).
    v8+ asks per group (the groups in the request's order, each with its own error); v9
    names the member asking, which a consumer-protocol group checks (UNKNOWN_MEMBER_ID,
    STALE_MEMBER_EPOCH as the group's error, as genuine 4.4.0 answers). Versions: v0-9;
    profile "2.4" v0-6 (before KIP-447), "2.5" v0-7, "4.0" v1-9 (KIP-896 floor)."""
    b = f.body
    stable = bool(b.get("require_stable"))
    if f.version < 8:
        topics = _fetched(c, b["group_id"], b.get("topics"), stable, (None, -1))
        return {"error_code": 0, "topics": topics}
    groups = []
    for g in b["groups"]:
        member = (g.get("member_id"), g.get("member_epoch", -1))
        try:
            topics, code = _fetched(c, g["group_id"], g.get("topics"), stable, member), 0
        except GroupError as exc:
            topics, code = [], exc.code
        groups.append({"group_id": g["group_id"], "topics": topics, "error_code": code})
    return {"groups": groups}


def _fetched(
    c: Broker,
    group_id: str,
    asked: list[Body] | None,
    stable: bool,
    member: tuple[str | None, int],
) -> list[Body]:
    wanted = None
    if asked is not None:
        wanted = [(t["name"], p) for t in asked for p in t["partition_indexes"]]
    rows = c.groups.fetch(group_id, wanted, stable, member)
    topics: dict[str, list[Body]] = {}
    for (topic, part), offset, meta, code in rows:
        topics.setdefault(topic, []).append(
            {
                "partition_index": part,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "metadata": meta,
                "error_code": code,
            }
        )
    return [{"name": t, "partitions": ps} for t, ps in topics.items()]


@handles("ConsumerGroupDescribe")
async def consumer_group_describe(c: Broker, f: Frame, host: str) -> Body:
    """Each consumer-protocol group's state (Empty, Reconciling while a member is not yet
    at the assignment epoch, else Stable), epochs, assignor and members with their current
    and target assignments by topic id and name. A group of the classic protocol, or none:
    GROUP_ID_NOT_FOUND with genuine 4.4.0's message; on a cluster whose ``group.version``
    is 0, UNSUPPORTED_VERSION for every group (genuine 4.4.0 still lists the API there).
    Not advertised by profiles "2.4" and "2.5". Versions: v0-1 (v1: each member's type, 1
    for the consumer protocol)."""
    out: list[Body] = []
    if c.features.get("group.version", 0) < 1:
        unsupported = {
            "error_code": codes.UNSUPPORTED_VERSION,
            "authorized_operations": -2147483648,
        }
        return {"groups": [{**unsupported, "group_id": g} for g in f.body["group_ids"]]}
    for gid in f.body["group_ids"]:
        g = c.groups.get(gid)
        s = g.modern if g is not None else None
        if s is None:
            why = "not found" if g is None else "is not a consumer group"
            out.append(
                {
                    "error_code": codes.GROUP_ID_NOT_FOUND,
                    "error_message": f"Group {gid} {why}.",
                    "group_id": gid,
                    "authorized_operations": -2147483648,
                }
            )
            continue

        def by_topic(partitions: set[Partition]) -> Body:
            topics: dict[str, list[int]] = {}
            for topic, p in sorted(partitions):
                topics.setdefault(topic, []).append(p)
            return {
                "topic_partitions": [
                    {"topic_id": c.topic_ids[t], "topic_name": t, "partitions": ps}
                    for t, ps in topics.items()
                    if t in c.topic_ids
                ]
            }

        members = list(s.members.values())
        settled = all(
            m.state == MEMBER_STABLE and m.epoch in (s.assignment_epoch, -2) for m in members
        )
        out.append(
            {
                "error_code": 0,
                "group_id": gid,
                "group_state": "Empty" if not members else "Stable" if settled else "Reconciling",
                "group_epoch": s.epoch,
                "assignment_epoch": s.assignment_epoch,
                "assignor_name": next((m.assignor for m in members if m.assignor), "uniform"),
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "member_epoch": m.epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.topics),
                        "subscribed_topic_regex": "",
                        "assignment": by_topic(m.assigned),  # not what it is giving up
                        "target_assignment": by_topic(s.target.get(m.member_id, set())),
                        "member_type": 1,
                    }
                    for m in members
                ],
                "authorized_operations": -2147483648,
            }
        )
    return {"groups": out}


@handles("DescribeGroups")
async def describe_groups(c: Broker, f: Frame, host: str) -> Body:
    """Each group's state, protocol type, protocol and members (the chosen protocol's
    metadata, the assignment); a group the coordinator does not hold, or one of the
    consumer protocol (genuine 4.4.0 answers it so: ConsumerGroupDescribe describes those),
    is answered Dead, with no error and no members. Versions: v0-3 (v3: authorized
    operations, not computed)."""
    out = []
    for gid in f.body["groups"]:
        g = c.groups.get(gid)
        if g is None or g.modern is not None:
            out.append(
                {
                    "error_code": 0,
                    "group": gid,
                    "state": "Dead",
                    "protocol_type": "",
                    "protocol": "",
                    "members": [],
                    "authorized_operations": -2147483648,
                }
            )
            continue
        out.append(
            {
                "error_code": 0,
                "group": gid,
                "state": g.state,
                "protocol_type": g.protocol_type or "",
                "protocol": g.protocol or "",
                "members": [
                    {
                        "member_id": m.member_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata_for(g.protocol or ""),
                        "member_assignment": m.assignment,
                    }
                    for m in g.members.values()
                ],
                "authorized_operations": -2147483648,
            }
        )
    return {"groups": out}


@handles("ListGroups")
async def list_groups(c: Broker, f: Frame, host: str) -> Body:
    """Every group the coordinator holds, with or without members, and its protocol type
    ("" for none, e.g. a group that only committed offsets); never an error.
    Versions: v0-2."""
    return {
        "error_code": 0,
        "groups": [
            {"group": g.group_id, "protocol_type": g.protocol_type or ""}
            for g in c.groups.groups.values()
        ],
    }
