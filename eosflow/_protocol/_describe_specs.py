"""What eosflow asks to describe a group and its transactions from outside the apps
(``eosflow status``, ``eosflow console``): ConsumerGroupDescribe and DescribeTransactions,
declared as Kafka's JSON message specs declare them (``_specs`` lists them with the rest)."""

from __future__ import annotations

from ._wire import MessageSpec, One, field

_CGD_ASSIGNMENT = One(  # not nullable here
    (
        field(
            "topic_partitions",
            (
                field("topic_id", "uuid"),
                field("topic_name", "string"),
                field("partitions", "[]int32"),
            ),
        ),
    ),
    nullable=False,
)

CONSUMER_GROUP_DESCRIBE = MessageSpec(
    api_key=69,
    name="ConsumerGroupDescribe",
    versions=(0, 1),
    flexible_from=0,
    request=(field("group_ids", "[]string"), field("include_authorized_operations", "bool")),
    response=(
        field("throttle_time_ms", "int32"),
        field(
            "groups",
            (
                field("error_code", "int16"),
                field("error_message", "string"),
                field("group_id", "string"),
                field("group_state", "string"),
                field("group_epoch", "int32"),
                field("assignment_epoch", "int32"),
                field("assignor_name", "string"),
                field(
                    "members",
                    (
                        field("member_id", "string"),
                        field("instance_id", "string"),
                        field("rack_id", "string"),
                        field("member_epoch", "int32"),
                        field("client_id", "string"),
                        field("client_host", "string"),
                        field("subscribed_topic_names", "[]string"),
                        field("subscribed_topic_regex", "string"),
                        field("assignment", _CGD_ASSIGNMENT),
                        field("target_assignment", _CGD_ASSIGNMENT),
                        field("member_type", "int8", since=1),
                    ),
                ),
                field("authorized_operations", "int32"),
            ),
        ),
    ),
)
"""A consumer-protocol group as its coordinator holds it (KIP-848; Kafka 4.0+), for
``eosflow status``: state, epochs and each member's current assignment by topic id and
name. A group of the classic protocol, or none, is GROUP_ID_NOT_FOUND. v1 adds the
member's type (classic or consumer, -1 unknown: a group migrating between them)."""

DESCRIBE_TRANSACTIONS = MessageSpec(
    api_key=65,
    name="DescribeTransactions",
    versions=(0, 0),
    flexible_from=0,
    request=(field("transactional_ids", "[]string"),),
    response=(
        field("throttle_time_ms", "int32"),
        field(
            "transaction_states",
            (
                field("error_code", "int16"),
                field("transactional_id", "string"),
                field("transaction_state", "string"),
                field("transaction_timeout_ms", "int32"),
                field("transaction_start_time_ms", "int64"),
                field("producer_id", "int64"),
                field("producer_epoch", "int16"),
                field(
                    "topic_partitions",
                    (field("name", "string"), field("partition_indexes", "[]int32")),
                ),
            ),
        ),
    ),
)
"""Transactional ids as their coordinator holds them (KIP-664; Kafka 3.0+), for the
group's page: each id's state (Empty, Ongoing, PrepareCommit, PrepareAbort,
CompleteCommit, CompleteAbort, Dead, PrepareEpochFence), producer id and epoch, its
timeout, when the open transaction began (-1: none) and the partitions it holds not yet
marked. Sent to each id's transaction coordinator: another broker answers
NOT_COORDINATOR for it, an id it never saw TRANSACTIONAL_ID_NOT_FOUND. The producer
epoch is an int16, as genuine 4.4.0 sends it (a later spec in Kafka's tree reads int32
for the same v0: decoding 4.4.0's answer so fails)."""
