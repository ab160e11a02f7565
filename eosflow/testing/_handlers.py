"""One handler per Kafka API: request dict in, response dict out.

Handlers are version-agnostic: they read the field names of the newest version the
cluster decodes (falling back to older names where a version renamed a field) and fill
every field any version may want; ``_codec`` drops what the negotiated version lacks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import _codes as E
from ._codec import API_KEYS
from ._groups import GroupError, Partition

if TYPE_CHECKING:
    from ._cluster import FakeCluster
    from ._codec import Frame

Body = dict[str, Any]
Handler = Callable[["FakeCluster", "Frame", str], Awaitable[Body]]
HANDLERS: dict[int, Handler] = {}


def _handles(api: str) -> Callable[[Handler], Handler]:
    """Register the handler of an API, by Kafka's name for it (e.g. ``"EndTxn"``)."""

    def deco(fn: Handler) -> Handler:
        HANDLERS[API_KEYS[api]] = fn
        return fn

    return deco


def _tp_offsets(topics: list[Body]) -> dict[Partition, tuple[int, str | None]]:
    out: dict[Partition, tuple[int, str | None]] = {}
    for t in topics:
        name: str = t["name"] if "name" in t else t["topic"]
        for p in t["partitions"]:
            idx: int = p.get("partition_index", p.get("partition"))
            off: int = p.get("committed_offset", p.get("offset"))
            out[(name, idx)] = (off, p.get("committed_metadata", p.get("metadata")))
    return out


def _by_topic(results: dict[Partition, int], tkey: str, pkey: str, ikey: str) -> list[Body]:
    topics: dict[str, list[Body]] = {}
    for (topic, part), code in results.items():
        topics.setdefault(topic, []).append({ikey: part, "error_code": code})
    return [{tkey: t, pkey: parts} for t, parts in topics.items()]


# --- metadata and admin ----------------------------------------------------------------


@_handles("ApiVersions")
async def api_versions(c: FakeCluster, f: Frame, host: str) -> Body:
    return {
        "error_code": 0,
        "api_versions": [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in c.api_versions()
        ],
    }


@_handles("Metadata")
async def metadata(c: FakeCluster, f: Frame, host: str) -> Body:
    wanted = f.body.get("topics")
    if wanted is None or (f.version == 0 and not wanted):
        names = sorted(c.topics)
    else:
        names = list(wanted)
    allow_create = f.body.get("allow_auto_topic_creation", True)
    topics = []
    for name in names:
        if name not in c.topics and allow_create and c.auto_create_topics:
            c.create_topic(name, c.default_partitions)
        parts = c.topics.get(name)
        if parts is None:
            topics.append(
                {
                    "error_code": E.UNKNOWN_TOPIC_OR_PARTITION,
                    "topic": name,
                    "is_internal": False,
                    "partitions": [],
                }
            )
            continue
        topics.append(
            {
                "error_code": 0,
                "topic": name,
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition": i,
                        "leader": c.node_id,
                        "leader_epoch": 0,
                        "replicas": [c.node_id],
                        "isr": [c.node_id],
                        "offline_replicas": [],
                    }
                    for i in range(len(parts))
                ],
            }
        )
    return {
        "brokers": [{"node_id": c.node_id, "host": c.host, "port": c.port, "rack": None}],
        "cluster_id": c.cluster_id,
        "controller_id": c.node_id,
        "topics": topics,
    }


@_handles("CreateTopics")
async def create_topics(c: FakeCluster, f: Frame, host: str) -> Body:
    results = []
    for t in f.body["create_topic_requests"]:
        name, n, rf = t["topic"], t["num_partitions"], t["replication_factor"]
        if name in c.topics:
            code, msg = E.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        elif n == 0 or n < -1:
            code, msg = E.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
        elif rf not in (-1, 1):
            code, msg = (
                E.INVALID_REPLICATION_FACTOR,
                (f"Replication factor: {rf} larger than available brokers: 1."),
            )
        else:
            code, msg = 0, None
            if not f.body.get("validate_only"):
                c.create_topic(name, c.default_partitions if n == -1 else n)
                c.topic_configs[name] = {
                    e["config_key"]: e["config_value"] for e in t.get("configs") or []
                }
        results.append({"topic": name, "error_code": code, "error_message": msg})
    return {"topic_errors": results}


@_handles("DeleteTopics")
async def delete_topics(c: FakeCluster, f: Frame, host: str) -> Body:
    results = []
    for name in f.body["topics"]:
        code = E.NONE if c.topics.pop(name, None) is not None else E.UNKNOWN_TOPIC_OR_PARTITION
        results.append({"topic": name, "error_code": code})
    return {"topic_error_codes": results}


# Topic defaults as a Kafka 4.0 broker reports them (config source 5: DEFAULT_CONFIG).
TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "min.insync.replicas": "1",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "segment.bytes": "1073741824",
}
_TOPIC, _BROKER = 2, 4


@_handles("DescribeConfigs")
async def describe_configs(c: FakeCluster, f: Frame, host: str) -> Body:
    out = []
    for r in f.body["resources"]:
        rtype, name, wanted = r["resource_type"], r["resource_name"], r["config_names"]
        if rtype == _TOPIC and name not in c.topics:
            out.append(
                {
                    "error_code": E.UNKNOWN_TOPIC_OR_PARTITION,
                    "resource_type": rtype,
                    "resource_name": name,
                    "config_entries": [],
                }
            )
            continue
        configs = (
            {**TOPIC_DEFAULTS, **c.topic_configs.get(name, {})}
            if rtype == _TOPIC
            else {"broker.id": str(c.node_id), "transaction.max.timeout.ms": "900000"}
        )
        entries: list[Body] = [
            {
                "config_names": k,
                "config_value": v,
                "read_only": False,
                "is_default": k not in c.topic_configs.get(name, {}),
                "config_source": 5 if k not in c.topic_configs.get(name, {}) else 1,
                "is_sensitive": False,
                "config_synonyms": [],
            }
            for k, v in sorted(configs.items())
            if not wanted or k in wanted
        ]
        out.append(
            {
                "error_code": 0,
                "error_message": None,
                "resource_type": rtype,
                "resource_name": name,
                "config_entries": entries,
            }
        )
    return {"resources": out}


@_handles("FindCoordinator")
async def find_coordinator(c: FakeCluster, f: Frame, host: str) -> Body:
    return {
        "error_code": 0,
        "error_message": None,
        "coordinator_id": c.node_id,
        "host": c.host,
        "port": c.port,
    }


# --- produce and fetch ---------------------------------------------------------------


@_handles("Produce")
async def produce(c: FakeCluster, f: Frame, host: str) -> Body:
    txn_id = f.body.get("transactional_id")
    out = []
    for t in f.body["topics"]:
        parts = []
        for p in t["partitions"]:
            tp = (t["topic"], p["partition"])
            log = c.log(tp)
            code, base = E.UNKNOWN_TOPIC_OR_PARTITION, -1
            data = p["messages"]
            if log is not None and data:
                code = E.NONE
                if txn_id is not None:
                    code = c.txn_produce_check(data, tp)
                if code == E.NONE:
                    code, base = log.append(data)
            parts.append(
                {
                    "partition": tp[1],
                    "error_code": code,
                    "offset": base,
                    "timestamp": -1,
                    "log_start_offset": 0 if log is None else log.log_start_offset,
                    "record_errors": [],
                    "error_message": None,
                }
            )
        out.append({"topic": t["topic"], "partitions": parts})
    return {"topics": out}


@_handles("Fetch")
async def fetch(c: FakeCluster, f: Frame, host: str) -> Body:
    body = f.body
    read_committed = body.get("isolation_level", 0) == 1
    deadline = time.monotonic() + max(body.get("max_wait_time", 0), 0) / 1000
    min_bytes = body.get("min_bytes", 1)
    while True:
        topics, size, logs = _fetch_once(c, body, read_committed)
        remaining = deadline - time.monotonic()
        if size >= min_bytes or remaining <= 0 or not logs:
            break
        waiters = [log.waiter() for log in logs]
        await asyncio.wait(waiters, timeout=remaining)
        for w in waiters:
            w.cancel()
    return {"error_code": 0, "session_id": 0, "topics": topics}


def _fetch_once(
    c: FakeCluster, body: Body, read_committed: bool
) -> tuple[list[Body], int, list[Any]]:
    budget = body.get("max_bytes", 0x7FFFFFFF)
    size = 0
    topics = []
    logs = []
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            tp = (t["topic"], p["partition"])
            log = c.log(tp)
            offset = p.get("fetch_offset", p.get("offset"))
            if log is None:
                parts.append(
                    {
                        "partition": tp[1],
                        "error_code": E.UNKNOWN_TOPIC_OR_PARTITION,
                        "highwater_offset": -1,
                        "last_stable_offset": -1,
                        "log_start_offset": -1,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "message_set": b"",
                    }
                )
                continue
            logs.append(log)
            max_bytes = min(p["max_bytes"], max(budget - size, 0))
            code, data, aborted = log.read(offset, max_bytes, read_committed, size == 0)
            size += len(data)
            parts.append(
                {
                    "partition": tp[1],
                    "error_code": code,
                    "highwater_offset": log.high_watermark,
                    "last_stable_offset": log.last_stable_offset,
                    "log_start_offset": log.log_start_offset,
                    "aborted_transactions": [
                        {"producer_id": a.producer_id, "first_offset": a.first_offset}
                        for a in aborted
                    ]
                    if read_committed
                    else None,
                    "preferred_read_replica": -1,
                    "message_set": data,
                }
            )
        topics.append({"topics": t["topic"], "partitions": parts})
    return topics, size, logs


@_handles("ListOffsets")
async def list_offsets(c: FakeCluster, f: Frame, host: str) -> Body:
    read_committed = f.body.get("isolation_level", 0) == 1
    out = []
    for t in f.body["topics"]:
        parts = []
        for p in t["partitions"]:
            log = c.log((t["topic"], p["partition"]))
            if log is None:
                parts.append(
                    {
                        "partition": p["partition"],
                        "error_code": E.UNKNOWN_TOPIC_OR_PARTITION,
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                        "offsets": [],
                    }
                )
                continue
            ts = p["timestamp"]
            if ts == -1:
                off = log.last_stable_offset if read_committed else log.high_watermark
            elif ts == -2:
                off = log.log_start_offset
            else:
                off = log.offset_for_timestamp(ts)
            parts.append(
                {
                    "partition": p["partition"],
                    "error_code": 0,
                    "timestamp": -1,
                    "offset": off,
                    "leader_epoch": 0,
                    "offsets": [off],
                }
            )
        out.append({"topic": t["topic"], "partitions": parts})
    return {"topics": out}


# --- groups ---------------------------------------------------------------------------


@_handles("JoinGroup")
async def join_group(c: FakeCluster, f: Frame, host: str) -> Body:
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
            "group_protocol": None,
            "leader_id": "",
            "member_id": e.member_id,
            "members": [],
        }


@_handles("SyncGroup")
async def sync_group(c: FakeCluster, f: Frame, host: str) -> Body:
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


@_handles("Heartbeat")
async def heartbeat(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    code = c.groups.heartbeat(
        b["group_id"], b["generation_id"], b["member_id"], b.get("group_instance_id")
    )
    return {"error_code": code}


@_handles("LeaveGroup")
async def leave_group(c: FakeCluster, f: Frame, host: str) -> Body:
    return {"error_code": c.groups.leave(f.body["group"], f.body["member_id"])}


@_handles("OffsetCommit")
async def offset_commit(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    offsets = _tp_offsets(b["topics"])
    unknown = {tp for tp in offsets if c.log(tp) is None}
    code = c.groups.commit(
        b["consumer_group"],
        b.get("consumer_group_generation_id", -1),
        b.get("consumer_id", ""),
        b.get("group_instance_id"),
        {tp: v for tp, v in offsets.items() if tp not in unknown},
    )
    results = {tp: (E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else code) for tp in offsets}
    return {"topics": _by_topic(results, "topic", "partitions", "partition")}


@_handles("OffsetFetch")
async def offset_fetch(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    wanted = None
    if b.get("topics") is not None:
        wanted = [(t["name"], p) for t in b["topics"] for p in t["partition_indexes"]]
    rows = c.groups.fetch(b["group_id"], wanted, bool(b.get("require_stable")))
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
    return {"error_code": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


@_handles("DescribeGroups")
async def describe_groups(c: FakeCluster, f: Frame, host: str) -> Body:
    out = []
    for gid in f.body["groups"]:
        g = c.groups.get(gid)
        if g is None:
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


@_handles("ListGroups")
async def list_groups(c: FakeCluster, f: Frame, host: str) -> Body:
    return {
        "error_code": 0,
        "groups": [
            {"group": g.group_id, "protocol_type": g.protocol_type or "consumer"}
            for g in c.groups.groups.values()
        ],
    }


# --- transactions -----------------------------------------------------------------------


@_handles("InitProducerId")
async def init_producer_id(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    code, pid, epoch = c.txns.init_producer_id(
        b["transactional_id"],
        b["transaction_timeout_ms"],
        b.get("producer_id", -1),
        b.get("producer_epoch", -1),
        f.version,
    )
    if code == E.NONE and pid >= 0:
        c.fence_producer(pid, epoch)
    return {"error_code": code, "producer_id": pid, "producer_epoch": epoch}


@_handles("AddPartitionsToTxn")
async def add_partitions_to_txn(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    tps = [(t["name"], p) for t in b["topics"] for p in t["partitions"]]
    results = c.txns.add_partitions(
        b["transactional_id"], b["producer_id"], b["producer_epoch"], tps, f.version
    )
    return {"results": _by_topic(results, "name", "results", "partition_index")}


@_handles("AddOffsetsToTxn")
async def add_offsets_to_txn(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    return {
        "error_code": c.txns.add_offsets(
            b["transactional_id"], b["producer_id"], b["producer_epoch"], b["group_id"], f.version
        )
    }


@_handles("TxnOffsetCommit")
async def txn_offset_commit(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    offsets = _tp_offsets(b["topics"])
    code = c.txns.txn_offset_commit(
        b["transactional_id"],
        b["group_id"],
        b["producer_id"],
        b["producer_epoch"],
        b.get("generation_id", -1),
        b.get("member_id") or "",
        b.get("group_instance_id"),
        offsets,
        f.version,
    )
    results = dict.fromkeys(offsets, code)
    return {"topics": _by_topic(results, "name", "partitions", "partition_index")}


@_handles("EndTxn")
async def end_txn(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    return {
        "error_code": c.txns.end_txn(
            b["transactional_id"],
            b["producer_id"],
            b["producer_epoch"],
            b["transaction_result"],
            f.version,
        )
    }
