"""Metadata and admin APIs: ApiVersions, Metadata, CreateTopics, DeleteTopics,
DescribeConfigs, FindCoordinator; SaslHandshake and SaslAuthenticate where no SASL login
is under way (a listener without SASL, or one already authenticated: ILLEGAL_SASL_STATE,
as Kafka; the login itself is ``_sasl``'s)."""

from __future__ import annotations

import uuid

from .._protocol import codes, wire
from ._api import Body, handles
from ._broker import RETENTION_MS, Broker
from ._codec import Frame


@handles("ApiVersions")
async def api_versions(c: Broker, f: Frame, host: str) -> Body:
    """The (key, min, max) of every API with a handler, as the profile allows (``PROFILES``);
    profile "4.0" advertises Produce from v0 yet accepts v3+ (``ADVERTISED_FLOORS``), as Kafka
    4.x does (KAFKA-18659). An ApiVersions version the cluster does not accept never gets here:
    ``_cluster`` answers it UNSUPPORTED_VERSION with the v0 list. Versions: v0-3 (v3, KIP-511,
    is flexible yet answered with response header v0, as Kafka does; its tagged fields
    carry the finalized features, ``Broker.features``: profile "4.0" group.version 1,
    the consumer group protocol; a level 0 is not listed, as Kafka leaves it out)."""
    finalized = {k: v for k, v in c.features.items() if v > 0}
    return {
        "error_code": 0,
        "api_versions": [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in c.api_versions()
        ],
        "tags": wire.features_tags(finalized) if finalized else {},
    }


@handles("SaslHandshake")
async def sasl_handshake(c: Broker, f: Frame, host: str) -> Body:
    """Reached only where no SASL login is under way (a listener without SASL, or a
    connection already logged in; during a login ``_sasl`` answers): ILLEGAL_SASL_STATE with no
    mechanisms, and the connection stays open. Versions: v0-1."""
    return {"error_code": codes.ILLEGAL_SASL_STATE, "enabled_mechanisms": []}


@handles("SaslAuthenticate")
async def sasl_authenticate(c: Broker, f: Frame, host: str) -> Body:
    """Reached only where no SASL login is under way, as SaslHandshake:
    ILLEGAL_SASL_STATE with a message and no token, and the connection stays open.
    Versions: v0-1."""
    return {
        "error_code": codes.ILLEGAL_SASL_STATE,
        "error_message": "no SASL login on this connection",
        "sasl_auth_bytes": b"",
        "session_lifetime_ms": 0,
    }


@handles("Metadata")
async def metadata(c: Broker, f: Frame, host: str) -> Body:
    """The one broker (node 0, also the controller) leads every partition, alone in its
    replicas and ISR, at leader epoch 0. Null topics (v0: an empty list) asks for every topic;
    a missing one is created with ``default_partitions`` when the request allows it (v4+;
    older: yes) and the cluster auto-creates topics, else it answers UNKNOWN_TOPIC_OR_PARTITION
    with no partitions. From v10 each topic carries its id (a new one each time a name is
    created); a topic asked for by id alone (v12: null name) that does not exist is
    UNKNOWN_TOPIC_ID, never created. Versions: v0-12."""
    wanted = f.body.get("topics")
    asked: list[tuple[str | None, uuid.UUID | None]]
    if wanted is None or (f.version == 0 and not wanted):
        asked = [(n, None) for n in sorted(c.topics)]
    else:
        asked = [(t["name"], t.get("topic_id")) for t in wanted]
    allow_create = f.body.get("allow_auto_topic_creation", True)
    topics: list[Body] = []
    for name, topic_id in asked:
        if name is None and topic_id is not None and topic_id.int:
            name = c.topic_name(topic_id)
            if name is None:
                topics.append(
                    {"error_code": codes.UNKNOWN_TOPIC_ID, "topic": None, "topic_id": topic_id}
                )
                continue
        assert name is not None
        if name not in c.topics and allow_create and c.auto_create_topics:
            c.create_topic(name, c.default_partitions)
        parts = c.topics.get(name)
        if parts is None:
            topics.append(
                {
                    "error_code": codes.UNKNOWN_TOPIC_OR_PARTITION,
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
                "topic_id": c.topic_ids[name],
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
                "topic_authorized_operations": -2147483648,
            }
        )
    return {
        "brokers": [{"node_id": c.node_id, "host": c.host, "port": c.port, "rack": None}],
        "cluster_id": c.cluster_id,
        "controller_id": c.node_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }


@handles("CreateTopics")
async def create_topics(c: Broker, f: Frame, host: str) -> Body:
    """Creates each topic (-1 partitions: ``default_partitions``) and keeps its configs for
    DescribeConfigs; ``validate_only`` only checks. TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS
    (0 or below -1), INVALID_REPLICATION_FACTOR (other than -1 or 1: there is one broker), each
    with Kafka's message. Versions: v0-3; profile "4.0" v2-3 (KIP-896 floor)."""
    results = []
    for t in f.body["create_topic_requests"]:
        name, n, rf = t["topic"], t["num_partitions"], t["replication_factor"]
        if name in c.topics:
            code, msg = codes.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        elif n == 0 or n < -1:
            code, msg = codes.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
        elif rf not in (-1, 1):
            code, msg = (
                codes.INVALID_REPLICATION_FACTOR,
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


@handles("DeleteTopics")
async def delete_topics(c: Broker, f: Frame, host: str) -> Body:
    """Removes each topic and its partition logs at once; UNKNOWN_TOPIC_OR_PARTITION for a
    topic that does not exist. Versions: v0-3; profile "4.0" v1-3 (KIP-896 floor)."""
    results = []
    for name in f.body["topics"]:
        c.topic_ids.pop(name, None)
        code = (
            codes.NONE if c.topics.pop(name, None) is not None else codes.UNKNOWN_TOPIC_OR_PARTITION
        )
        results.append({"topic": name, "error_code": code})
    return {"topic_error_codes": results}


# Topic defaults as a Kafka 4.0 broker reports them (config source 5: DEFAULT_CONFIG).
TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "retention.ms": str(RETENTION_MS),
    "retention.bytes": "-1",
    "min.insync.replicas": "1",
    "max.message.bytes": "1048588",
    "message.timestamp.type": "CreateTime",
    "segment.bytes": "1073741824",
}
_TOPIC, _BROKER = 2, 4


@handles("DescribeConfigs")
async def describe_configs(c: Broker, f: Frame, host: str) -> Body:
    """A topic (resource type 2): Kafka 4.0's defaults for a few keys (``TOPIC_DEFAULTS``,
    source 5) overlaid by the configs given at CreateTopics (source 1), or
    UNKNOWN_TOPIC_OR_PARTITION. The broker (type 4, named "" or its node id): broker.id and
    transaction.max.timeout.ms; another broker name is INVALID_REQUEST with Kafka's message.
    No config names asks for every key. Versions: v0-2; profile "4.0" v1-2 (KIP-896 floor)."""
    out = []
    for r in f.body["resources"]:
        rtype, name, wanted = r["resource_type"], r["resource_name"], r["config_names"]
        if rtype == _TOPIC and name not in c.topics:
            out.append(
                {
                    "error_code": codes.UNKNOWN_TOPIC_OR_PARTITION,
                    "resource_type": rtype,
                    "resource_name": name,
                    "config_entries": [],
                }
            )
            continue
        if rtype == _BROKER and name not in ("", str(c.node_id)):
            out.append(
                {
                    "error_code": codes.INVALID_REQUEST,
                    "error_message": f"Unexpected broker id, expected {c.node_id} or empty "
                    f"string, but received {name}",
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


@handles("FindCoordinator")
async def find_coordinator(c: Broker, f: Frame, host: str) -> Body:
    """Node 0 coordinates everything, once loaded: for ``ClusterSettings.coordinator_load_s``
    after the first ask of a kind (v0 has no key type: a group), COORDINATOR_NOT_AVAILABLE
    with no node (-1, "", -1), as Kafka answers while its internal topic loads.
    Versions: v0-1 in every profile."""
    kind = "transaction" if f.body.get("coordinator_type", 0) == 1 else "group"
    if c.loading(kind):
        return {
            "error_code": codes.COORDINATOR_NOT_AVAILABLE,
            "error_message": "The coordinator is not available.",
            "coordinator_id": -1,
            "host": "",
            "port": -1,
        }
    return {
        "error_code": 0,
        "error_message": None,
        "coordinator_id": c.node_id,
        "host": c.host,
        "port": c.port,
    }
