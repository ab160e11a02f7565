"""The request versions eosflow declares itself (``_wire`` builds them): what aiokafka
0.14 lacks -- the KIP-447 commit, stable offset fetches, the KIP-360 re-initialisation,
ApiVersions v3 with the cluster's features, the consumer group protocol (KIP-848) -- and
what the test cluster must decode at every version it advertises. Field names follow
aiokafka's snake_case habit; versions and nullability follow Kafka's JSON message specs
(``clients/src/main/resources/common/message``)."""

from __future__ import annotations

from ._describe_specs import CONSUMER_GROUP_DESCRIBE as CONSUMER_GROUP_DESCRIBE
from ._describe_specs import DESCRIBE_TRANSACTIONS as DESCRIBE_TRANSACTIONS
from ._wire import API_VERSIONS_KEY, MessageSpec, One, field

_OFFSET_COMMIT_PARTITION_RESP = (field("partition_index", "int32"), field("error_code", "int16"))

# v4 (KIP-890) may answer TRANSACTION_ABORTABLE; v5 is transactions v2's: the group
# joins the transaction implicitly (no AddOffsetsToTxn), on clusters with
# transaction.version >= 2.
TXN_OFFSET_COMMIT = MessageSpec(
    api_key=28,
    name="TxnOffsetCommit",
    versions=(0, 5),
    flexible_from=3,
    request=(
        field("transactional_id", "string"),
        field("group_id", "string"),
        field("producer_id", "int64"),
        field("producer_epoch", "int16"),
        field("generation_id", "int32", since=3),
        field("member_id", "string", since=3),
        field("group_instance_id", "string", since=3),
        field(
            "topics",
            (
                field("name", "string"),
                field(
                    "partitions",
                    (
                        field("partition_index", "int32"),
                        field("committed_offset", "int64"),
                        field("committed_leader_epoch", "int32", since=2),
                        field("committed_metadata", "string"),
                    ),
                ),
            ),
        ),
    ),
    response=(
        field("throttle_time_ms", "int32"),
        field(
            "topics", (field("name", "string"), field("partitions", _OFFSET_COMMIT_PARTITION_RESP))
        ),
    ),
)

_OFFSET_FETCH_PARTITIONS = (
    field("partition_index", "int32"),
    field("committed_offset", "int64"),
    field("committed_leader_epoch", "int32", since=5),
    field("metadata", "string"),
    field("error_code", "int16"),
)

# v8 (Kafka 3.0, KIP-709) asks for groups; v9 (3.6+, KIP-848) names the member asking:
# a consumer-protocol group checks its id and epoch (UNKNOWN_MEMBER_ID,
# STALE_MEMBER_EPOCH). A body carries both shapes; the negotiated version takes its own.
OFFSET_FETCH = MessageSpec(
    api_key=9,
    name="OffsetFetch",
    versions=(1, 9),
    flexible_from=6,
    request=(
        field("group_id", "string", until=7),
        field("topics", (field("name", "string"), field("partition_indexes", "[]int32")), until=7),
        field(
            "groups",
            (
                field("group_id", "string"),
                field("member_id", "string", since=9),
                field("member_epoch", "int32", since=9),
                field("topics", (field("name", "string"), field("partition_indexes", "[]int32"))),
            ),
            since=8,
        ),
        field("require_stable", "bool", since=7),
    ),
    response=(
        field("throttle_time_ms", "int32", since=3),
        field(
            "topics",
            (field("name", "string"), field("partitions", _OFFSET_FETCH_PARTITIONS)),
            until=7,
        ),
        field("error_code", "int16", since=2, until=7),
        field(
            "groups",
            (
                field("group_id", "string"),
                field(
                    "topics",
                    (field("name", "string"), field("partitions", _OFFSET_FETCH_PARTITIONS)),
                ),
                field("error_code", "int16"),
            ),
            since=8,
        ),
    ),
)

INIT_PRODUCER_ID = MessageSpec(
    api_key=22,
    name="InitProducerId",
    versions=(0, 4),
    flexible_from=2,
    request=(
        field("transactional_id", "string"),
        field("transaction_timeout_ms", "int32"),
        field("producer_id", "int64", since=3),
        field("producer_epoch", "int16", since=3),
    ),
    response=(
        field("throttle_time_ms", "int32"),
        field("error_code", "int16"),
        field("producer_id", "int64"),
        field("producer_epoch", "int16"),
    ),
)

HEARTBEAT = MessageSpec(
    api_key=12,
    name="Heartbeat",
    versions=(0, 4),
    flexible_from=4,
    request=(
        field("group_id", "string"),
        field("generation_id", "int32"),
        field("member_id", "string"),
        field("group_instance_id", "string", since=3),
    ),
    response=(field("throttle_time_ms", "int32", since=1), field("error_code", "int16")),
)

_TXN_SIMPLE_RESP = (field("throttle_time_ms", "int32"), field("error_code", "int16"))

# v4 (KIP-890) may answer TRANSACTION_ABORTABLE; v5 is transactions v2's: on a cluster
# with transaction.version >= 2 every EndTxn bumps the producer epoch, and the answer
# carries the producer id and epoch to use next (-1 elsewhere).
END_TXN = MessageSpec(
    api_key=26,
    name="EndTxn",
    versions=(0, 5),
    flexible_from=3,
    request=(
        field("transactional_id", "string"),
        field("producer_id", "int64"),
        field("producer_epoch", "int16"),
        field("transaction_result", "bool"),
    ),
    response=(
        *_TXN_SIMPLE_RESP,
        field("producer_id", "int64", since=5),
        field("producer_epoch", "int16", since=5),
    ),
)

# Produce from v9 (flexible): v12 is transactions v2's, whose partitions join the
# transaction implicitly (no AddPartitionsToTxn). Below v9 aiokafka's own structs serve;
# field names follow them (topics/partitions/messages), so the test cluster's handler
# reads every version alike. v10+'s tagged leader hints are left out.
PRODUCE = MessageSpec(
    api_key=0,
    name="Produce",
    versions=(9, 12),
    flexible_from=9,
    request=(
        field("transactional_id", "string"),
        field("required_acks", "int16"),
        field("timeout", "int32"),
        field(
            "topics",
            (
                field("topic", "string"),
                field("partitions", (field("partition", "int32"), field("messages", "bytes"))),
            ),
        ),
    ),
    response=(
        field(
            "topics",
            (
                field("topic", "string"),
                field(
                    "partitions",
                    (
                        field("partition", "int32"),
                        field("error_code", "int16"),
                        field("offset", "int64"),
                        field("timestamp", "int64"),
                        field("log_start_offset", "int64"),
                        field(
                            "record_errors",
                            (
                                field("batch_index", "int32"),
                                field("batch_index_error_message", "string"),
                            ),
                        ),
                        field("error_message", "string"),
                    ),
                ),
            ),
        ),
        field("throttle_time_ms", "int32"),
    ),
)

ADD_OFFSETS_TO_TXN = MessageSpec(
    api_key=25,
    name="AddOffsetsToTxn",
    versions=(0, 2),
    flexible_from=3,
    request=(
        field("transactional_id", "string"),
        field("producer_id", "int64"),
        field("producer_epoch", "int16"),
        field("group_id", "string"),
    ),
    response=_TXN_SIMPLE_RESP,
)

ADD_PARTITIONS_TO_TXN = MessageSpec(
    api_key=24,
    name="AddPartitionsToTxn",
    versions=(0, 2),
    flexible_from=3,
    request=(
        field("transactional_id", "string"),
        field("producer_id", "int64"),
        field("producer_epoch", "int16"),
        field("topics", (field("name", "string"), field("partitions", "[]int32"))),
    ),
    response=(
        field("throttle_time_ms", "int32"),
        field(
            "results",
            (
                field("name", "string"),
                field("results", (field("partition_index", "int32"), field("error_code", "int16"))),
            ),
        ),
    ),
)

# JoinGroup and SyncGroup keep aiokafka's field names, so the test cluster's handlers read
# every version alike; aiokafka itself defines only some of these versions.
JOIN_GROUP = MessageSpec(
    api_key=11,
    name="JoinGroup",
    versions=(0, 5),
    flexible_from=6,
    request=(
        field("group", "string"),
        field("session_timeout", "int32"),
        field("rebalance_timeout", "int32", since=1),
        field("member_id", "string"),
        field("group_instance_id", "string", since=5),
        field("protocol_type", "string"),
        field(
            "group_protocols",
            (field("protocol_name", "string"), field("protocol_metadata", "bytes")),
        ),
    ),
    response=(
        field("throttle_time_ms", "int32", since=2),
        field("error_code", "int16"),
        field("generation_id", "int32"),
        field("group_protocol", "string"),
        field("leader_id", "string"),
        field("member_id", "string"),
        field(
            "members",
            (
                field("member_id", "string"),
                field("group_instance_id", "string", since=5),
                field("member_metadata", "bytes"),
            ),
        ),
    ),
)

SYNC_GROUP = MessageSpec(
    api_key=14,
    name="SyncGroup",
    versions=(0, 3),
    flexible_from=4,
    request=(
        field("group", "string"),
        field("generation_id", "int32"),
        field("member_id", "string"),
        field("group_instance_id", "string", since=3),
        field(
            "group_assignment", (field("member_id", "string"), field("member_metadata", "bytes"))
        ),
    ),
    response=(
        field("throttle_time_ms", "int32", since=1),
        field("error_code", "int16"),
        field("member_assignment", "bytes"),
    ),
)

# aiokafka's own ListOffsets v4/v5 classes declare current_leader_epoch as int64 (Kafka's
# spec: int32); aiokafka never sends them, but other clients (librdkafka) do.
LIST_OFFSETS = MessageSpec(
    api_key=2,
    name="ListOffsets",
    versions=(1, 5),
    flexible_from=6,
    request=(
        field("replica_id", "int32"),
        field("isolation_level", "int8", since=2),
        field(
            "topics",
            (
                field("topic", "string"),
                field(
                    "partitions",
                    (
                        field("partition", "int32"),
                        field("current_leader_epoch", "int32", since=4),
                        field("timestamp", "int64"),
                    ),
                ),
            ),
        ),
    ),
    response=(
        field("throttle_time_ms", "int32", since=2),
        field(
            "topics",
            (
                field("topic", "string"),
                field(
                    "partitions",
                    (
                        field("partition", "int32"),
                        field("error_code", "int16"),
                        field("timestamp", "int64"),
                        field("offset", "int64"),
                        field("leader_epoch", "int32", since=4),
                    ),
                ),
            ),
        ),
    ),
)

API_VERSIONS = MessageSpec(
    api_key=API_VERSIONS_KEY,
    name="ApiVersions",
    versions=(0, 3),
    flexible_from=3,
    request=(
        field("client_software_name", "string", since=3),
        field("client_software_version", "string", since=3),
    ),
    response=(
        field("error_code", "int16"),
        field(
            "api_versions",
            (
                field("api_key", "int16"),
                field("min_version", "int16"),
                field("max_version", "int16"),
            ),
        ),
        field("throttle_time_ms", "int32", since=1),
    ),
)
"""ApiVersions. From v3 (KIP-511; Kafka 2.4+) the answer's tagged fields carry the
cluster's features (KIP-584): tag 0 SupportedFeatures, 1 FinalizedFeaturesEpoch, 2
FinalizedFeatures (``finalized_features`` reads it) -- e.g. ``group.version`` 1 where
the consumer group protocol (KIP-848) is enabled, ``transaction.version`` 2 where
transactions v2 (KIP-890) are."""

METADATA = MessageSpec(
    api_key=3,
    name="Metadata",
    versions=(0, 12),
    flexible_from=9,
    request=(
        # v0: an empty list asks for every topic; v1+: null does
        field("topics", (field("topic_id", "uuid", since=10), field("name", "string"))),
        field("allow_auto_topic_creation", "bool", since=4),
        field("include_cluster_authorized_operations", "bool", since=8, until=10),
        field("include_topic_authorized_operations", "bool", since=8),
    ),
    response=(
        field("throttle_time_ms", "int32", since=3),
        field(
            "brokers",
            (
                field("node_id", "int32"),
                field("host", "string"),
                field("port", "int32"),
                field("rack", "string", since=1),
            ),
        ),
        field("cluster_id", "string", since=2),
        field("controller_id", "int32", since=1),
        field(
            "topics",
            (
                field("error_code", "int16"),
                field("topic", "string"),  # nullable from v12 (a topic asked for by id)
                field("topic_id", "uuid", since=10),
                field("is_internal", "bool", since=1),
                field(
                    "partitions",
                    (
                        field("error_code", "int16"),
                        field("partition", "int32"),
                        field("leader", "int32"),
                        field("leader_epoch", "int32", since=7),
                        field("replicas", "[]int32"),
                        field("isr", "[]int32"),
                        field("offline_replicas", "[]int32", since=5),
                    ),
                ),
                field("topic_authorized_operations", "int32", since=8),
            ),
        ),
        field("cluster_authorized_operations", "int32", since=8, until=10),
    ),
)
"""Metadata, declared for the topic ids (v10+, Kafka 2.8+) that the consumer group protocol
assigns partitions by. The field names of v0-5 are aiokafka's (``topic``, ``partition``,
``leader``, ``replicas``, ``isr``), so one handler reads both; a v0-9 request's topic list is
a list of names on the wire, decoded here as ``{"name": ...}`` structs."""

_CGH_TOPIC_PARTITIONS = (field("topic_id", "uuid"), field("partitions", "[]int32"))

CONSUMER_GROUP_HEARTBEAT = MessageSpec(
    api_key=68,
    name="ConsumerGroupHeartbeat",
    versions=(0, 1),
    flexible_from=0,
    request=(
        field("group_id", "string"),
        field("member_id", "string"),
        field("member_epoch", "int32"),
        field("instance_id", "string"),
        field("rack_id", "string"),
        field("rebalance_timeout_ms", "int32"),
        field("subscribed_topic_names", "[]string"),
        field("subscribed_topic_regex", "string", since=1),
        field("server_assignor", "string"),
        field("topic_partitions", _CGH_TOPIC_PARTITIONS),
    ),
    response=(
        field("throttle_time_ms", "int32"),
        field("error_code", "int16"),
        field("error_message", "string"),
        field("member_id", "string"),
        field("member_epoch", "int32"),
        field("heartbeat_interval_ms", "int32"),
        field("assignment", One((field("topic_partitions", _CGH_TOPIC_PARTITIONS),))),
    ),
)
"""The consumer group protocol's one request (KIP-848; Kafka 4.0+ where ``group.version``
>= 1). Epoch 0 joins, -1 leaves, -2 leaves a static member that will rejoin. From v1
(KIP-1082) the member makes its own member id (a UUID). ``topic_partitions`` in the
request are the partitions the member owns (acknowledging a revocation by leaving them
out); the answer's ``assignment`` (null when unchanged) is the target, by topic id.
A field given as None is sent null ("unchanged"); one left out of the body is sent empty."""

SPECS: dict[int, MessageSpec] = {
    s.api_key: s
    for s in (
        API_VERSIONS,
        METADATA,
        CONSUMER_GROUP_HEARTBEAT,
        CONSUMER_GROUP_DESCRIBE,
        DESCRIBE_TRANSACTIONS,
        TXN_OFFSET_COMMIT,
        OFFSET_FETCH,
        INIT_PRODUCER_ID,
        HEARTBEAT,
        END_TXN,
        PRODUCE,
        ADD_OFFSETS_TO_TXN,
        ADD_PARTITIONS_TO_TXN,
        JOIN_GROUP,
        SYNC_GROUP,
        LIST_OFFSETS,
    )
}
"""The specs eosflow declares itself, by API key. They take precedence over aiokafka's
classes in the test cluster, so one declaration serves the client side and the server side."""
