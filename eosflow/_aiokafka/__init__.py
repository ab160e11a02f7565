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
- the consumer group protocol's requests (KIP-848: ConsumerGroupHeartbeat, topic ids from
  Metadata v12) and the manual assignment that keeps kept partitions' positions (``_members``);
- KIP-360 re-initialisation (InitProducerId v3+ with the current id and epoch);
- ListOffsets to each partition's leader for the reset policy's position (``_log_offsets``),
  in place of aiokafka's ``seek_to_beginning``/``seek_to_end``, which wait behind its
  group coordinator;
- transactions v2 (KIP-890 part 2, ``_txn_v2``): Produce v12 and EndTxn v5 in place of
  aiokafka's v1 requests on one producer, the bumped epoch adopted after each EndTxn;
- consumed records decoded straight into eosflow's ``Record`` (``_fetch``: one object per
  record instead of aiokafka's ``ConsumerRecord`` and a copy), and no fetch held long at
  the broker while records fetched from it wait to be taken or a partition is paused
  (``_fetch``);
- outputs appended to aiokafka's record builder without its Python wrapper (``Batch``),
  joining a batch still queued for their partition rather than waiting behind it
  (``_produce``);
- the producer's partitioner, for outputs produced as whole batches (``send_batch`` needs
  the partition up front; ``_partitioner`` keeps ``send``'s choice, murmur2 of the key,
  with the partition list built once per metadata answer and recent keys' hashes kept).

Private names of aiokafka used here (``tests/unit/test_public_api.py`` checks that no other
module uses any, but ``_protocol/_wire.py``'s ``_CLASSES``, and that this list is complete), read
only unless said: ``consumer._client`` (written: its ``send``, replaced by one that
writes a connection's ``_request_timeout`` -- found in its ``_conns`` -- for the one call
that sends a JoinGroup: ``_long_joins``), ``consumer._coordinator`` (generation, member_id,
coordinator_id, _group_instance_id, and whether its ``_coordination_task``,
``_heartbeat_task`` or ``_commit_refresh_task`` ended on an error; written: its
``_maybe_refresh_commit_offsets``, replaced by one that sends nothing, since eosflow
positions every partition itself and ``seek`` answers the fetcher's wait for a committed
offset through the partition state's public ``update_committed``: ``_own_positions``;
and its ``_do_heartbeat``, wrapped so that an unexpected answer is a failed heartbeat:
``_patient``),
``producer._txn_manager`` (producer_id, producer_epoch, its ``_transaction_waiter``'s
error; written: consumer_group_added), ``producer.client._wait_on_metadata``,
``producer._partition`` and ``producer._partitioner`` (whether it is aiokafka's default),
``cluster._partitions`` (a topic's partition map, replaced whole by each metadata answer),
``cluster._last_successful_refresh_ms`` (a metadata answer came),
``producer._max_request_size``, a ``BatchBuilder``'s ``_builder.append`` (called
directly), ``_closed`` and ``_relative_offset`` (written: ``Batch``),
``producer._message_accumulator._batches`` (a partition's queued batches, each
``MessageBatch``'s ``_builder`` compared: records join a batch still queued,
``_produce``), ``consumer._subscription`` (an assigned partition's position and pause,
read for lag and by ``reassign``),
``producer._sender`` (its task is cancelled when a stuck producer is closed by force;
under transactions v2 its ``_send_produce_req`` and ``_do_txn_commit`` are replaced by
ones that read its ``_acks``, ``_request_timeout_ms``, ``_message_accumulator``,
``_in_flight`` and ``_muted_partitions`` and call ``_find_coordinator``, through
subclasses of its produce and EndTxn handlers, one overriding ``_can_retry``; the
transaction manager's ``maybe_add_partition_to_txn`` is replaced by one that writes
``_txn_partitions``, and a successful EndTxn v5 writes its ``_pid_and_epoch`` and clears
its ``_sequence_numbers``) and
``consumer._fetcher`` (its ``_pending_tasks`` are cancelled and awaited when a consumer
whose ``stop()`` failed is closed by force; its
``_proc_offset_request`` is wrapped so a ListOffsets refused for leadership forces a
metadata update: ``_leaders``), and
``aiokafka.consumer.fetcher.PartitionRecords`` (replaced by a subclass whose
``_unpack_records`` decodes eosflow ``Record``s for the group consumer -- reading
``_tp``, ``_records``, ``_check_crcs``, ``_isolation_level``, ``_aborted_producers``,
calling ``_consume_aborted_up_to`` and ``_contains_abort_marker``, writing
``next_fetch_offset`` -- and whose ``__iter__`` hands over its ``_records_iterator``:
``_fetch``), and ``aiokafka.consumer.consumer.Fetcher`` (replaced by a subclass whose
``_get_actions_per_node`` cuts the wait of the group consumer's fetches to a broker whose
fetched records are held or whose partitions are paused -- reading ``_key_deserializer``
and ``_records``, calling ``_select_read_replica``, writing a ``FetchRequest``'s
``_max_wait_ms``: ``_fetch``).

Errors: this module is eosflow's one error boundary towards aiokafka and Kafka.
``map_error`` turns any aiokafka exception or Kafka error code into eosflow's tree
(``_errors.py``): fencing answers into ``Fenced`` (the session resolves them by KIP-360),
authorization failures into ``AuthorizationError``, broker and network failures worth a
retry into ``TransientError``, anything else into ``FatalError`` naming the step. The
session wraps each step in ``mapped(step)`` and catches only eosflow's errors. Retry loops
here are bounded in time, and running out of retries raises ``TransientError``: it never
comes back as "no error".
"""

from ._clients import (
    Batch,
    GroupIdentity,
    close_consumer,
    close_producer,
    commit_offsets,
    consumer_failure,
    group_identity,
    log_position,
    manual_consumer,
    max_request_bytes,
    member_client_id,
    member_id_parts,
    member_started,
    pause,
    plain_consumer,
    plain_producer,
    poll,
    position_now,
    producer_failure,
    producer_for,
    producer_identity,
    resume,
    seek,
    start,
    state_reader,
    topic_partitions,
)
from ._errors import (
    AUTHORIZATION,
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_ERRORS,
    FENCING,
    REBALANCE_IN_PROGRESS,
    RETRY_CODES,
    TRANSIENT_CODES,
    UNKNOWN_MEMBER_ID,
    UNSTABLE_OFFSET_COMMIT,
    Fenced,
    error_for,
    error_name,
    is_fencing,
    map_error,
    mapped,
)
from ._fetch import as_records
from ._group_consumer import consumer_for
from ._groups import (
    GroupView,
    Member,
    TxnView,
    describe_group,
    describe_transactions,
    remove_member,
)
from ._log_offsets import log_offsets
from ._members import HeartbeatAnswer, group_heartbeat, reassign, topic_ids
from ._partitioner import Partitioner, default_partition
from ._produce import Sends, flush, send_all, send_to_partition
from ._requests import (
    Capabilities,
    capabilities,
    commit_offsets_in_txn,
    fetch_committed,
    forced_heartbeat,
    reinit_producer_id,
)
from ._security import LoginWatch
from ._topics import delete_records, ensure_topics, partition_counts
from ._txn_v2 import transactions_v2, use_transactions_v2

__all__ = [
    "AUTHORIZATION",
    "CONCURRENT_TRANSACTIONS",
    "COORDINATOR_ERRORS",
    "FENCING",
    "REBALANCE_IN_PROGRESS",
    "RETRY_CODES",
    "TRANSIENT_CODES",
    "UNKNOWN_MEMBER_ID",
    "UNSTABLE_OFFSET_COMMIT",
    "Batch",
    "Capabilities",
    "Fenced",
    "GroupIdentity",
    "GroupView",
    "HeartbeatAnswer",
    "LoginWatch",
    "Member",
    "Partitioner",
    "Sends",
    "TxnView",
    "as_records",
    "capabilities",
    "close_consumer",
    "close_producer",
    "commit_offsets",
    "commit_offsets_in_txn",
    "consumer_failure",
    "consumer_for",
    "default_partition",
    "delete_records",
    "describe_group",
    "describe_transactions",
    "ensure_topics",
    "error_for",
    "error_name",
    "fetch_committed",
    "flush",
    "forced_heartbeat",
    "group_heartbeat",
    "group_identity",
    "is_fencing",
    "log_offsets",
    "log_position",
    "manual_consumer",
    "map_error",
    "mapped",
    "max_request_bytes",
    "member_client_id",
    "member_id_parts",
    "member_started",
    "partition_counts",
    "pause",
    "plain_consumer",
    "plain_producer",
    "poll",
    "position_now",
    "producer_failure",
    "producer_for",
    "producer_identity",
    "reassign",
    "reinit_producer_id",
    "remove_member",
    "resume",
    "seek",
    "send_all",
    "send_to_partition",
    "start",
    "state_reader",
    "topic_ids",
    "topic_partitions",
    "transactions_v2",
    "use_transactions_v2",
]
