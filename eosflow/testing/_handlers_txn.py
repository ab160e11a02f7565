"""The transaction coordinator's APIs: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, DescribeTransactions."""

from __future__ import annotations

from .._protocol import codes
from ._api import Body, by_topic, handles, sorted_out, tp_offsets
from ._broker import Broker
from ._codec import Frame
from ._txn import ONGOING, PREPARE_ABORT, PREPARE_COMMIT


@handles("InitProducerId")
async def init_producer_id(c: Broker, f: Frame, host: str) -> Body:
    """From 4.0 (KRaft) the broker takes producer ids in blocks from the controller: for
    ``ClusterSettings.producer_ids_load_s`` after the first InitProducerId it answers
    COORDINATOR_LOAD_IN_PROGRESS (2.4.1 makes the first one wait instead).
    Versions: v0-4; profile "2.4" v0-2 (no KIP-360), "2.5" v0-3."""
    b = f.body
    if c.settings.profile == "4.0" and c.loading("producer ids"):
        return {
            "error_code": codes.COORDINATOR_LOAD_IN_PROGRESS,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    code, pid, epoch = c.txns.init_producer_id(
        b["transactional_id"],
        b["transaction_timeout_ms"],
        b.get("producer_id", -1),
        b.get("producer_epoch", -1),
        f.version,
    )
    if code == codes.NONE and pid >= 0:
        c.fence_producer(pid, epoch)
    return {"error_code": code, "producer_id": pid, "producer_epoch": epoch}


@handles("AddPartitionsToTxn")
async def add_partitions_to_txn(c: Broker, f: Frame, host: str) -> Body:
    """Adds the partitions to the producer's transaction, opening it (its timeout starts).
    INVALID_PRODUCER_ID_MAPPING for an unknown transactional id or another producer id;
    another epoch: PRODUCER_FENCED (v2+; older INVALID_PRODUCER_EPOCH); CONCURRENT_TRANSACTIONS
    while the last transaction's markers are written. A partition that does not exist gets
    UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED, and nothing is added.
    Versions: v0-2; profiles "2.4" and "2.5" v0-1."""
    b = f.body
    tps = [(t["name"], p) for t in b["topics"] for p in t["partitions"]]
    results = c.txns.add_partitions(
        b["transactional_id"], b["producer_id"], b["producer_epoch"], tps, f.version
    )
    return {"results": by_topic(results, "name", "results", "partition_index")}


@handles("AddOffsetsToTxn")
async def add_offsets_to_txn(c: Broker, f: Frame, host: str) -> Body:
    """Adds the group to the producer's transaction (opening it), so TxnOffsetCommit may
    stage offsets for it. INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (v2+; older
    INVALID_PRODUCER_EPOCH) and CONCURRENT_TRANSACTIONS as AddPartitionsToTxn.
    Versions: v0-2; profiles "2.4" and "2.5" v0-1."""
    b = f.body
    return {
        "error_code": c.txns.add_offsets(
            b["transactional_id"], b["producer_id"], b["producer_epoch"], b["group_id"], f.version
        )
    }


@handles("TxnOffsetCommit")
async def txn_offset_commit(c: Broker, f: Frame, host: str) -> Body:
    """Stages the offsets in the group until the transaction ends: applied ``offset_lag_s``
    after a committing EndTxn, dropped on abort. INVALID_PRODUCER_ID_MAPPING; another epoch:
    PRODUCER_FENCED (v3+; older INVALID_PRODUCER_EPOCH); INVALID_TXN_STATE unless the open
    transaction holds the group; v3 (KIP-447) with a generation, member or instance id also
    runs the group's member checks. UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist,
    OFFSET_METADATA_TOO_LARGE for metadata over 4096 characters (neither is staged).
    v5 under transactions v2 adds the group to the transaction itself (``_txn``).
    Versions: v0-5; profile "2.4" v0-2 (before KIP-447), "2.5" v0-3."""
    b = f.body
    offsets = tp_offsets(b["topics"])
    taken, refused = sorted_out(offsets, lambda tp: c.log(tp) is not None)
    code = c.txns.txn_offset_commit(
        b["transactional_id"],
        b["group_id"],
        b["producer_id"],
        b["producer_epoch"],
        b.get("generation_id", -1),
        b.get("member_id") or "",
        b.get("group_instance_id"),
        taken,
        f.version,
    )
    results = {tp: refused.get(tp, code) for tp in offsets}
    return {"topics": by_topic(results, "name", "partitions", "partition_index")}


@handles("EndTxn")
async def end_txn(c: Broker, f: Frame, host: str) -> Body:
    """Decides the open transaction and answers at once; its markers land ``marker_delay_s``
    later (docs/design.md), and until then either result answers CONCURRENT_TRANSACTIONS. Once
    written, the same result answers no error and the other INVALID_TXN_STATE, as does a
    producer with no transaction. INVALID_PRODUCER_ID_MAPPING; another epoch: PRODUCER_FENCED
    (v2+; older INVALID_PRODUCER_EPOCH). v5 under transactions v2 bumps the epoch and
    answers it (``_txn``); elsewhere the answer's producer id and epoch are -1.
    Versions: v0-5; profiles "2.4" and "2.5" v0-1."""
    b = f.body
    code, pid, epoch = c.txns.end_txn(
        b["transactional_id"],
        b["producer_id"],
        b["producer_epoch"],
        b["transaction_result"],
        f.version,
    )
    return {"error_code": code, "producer_id": pid, "producer_epoch": epoch}


@handles("DescribeTransactions")
async def describe_transactions(c: Broker, f: Frame, host: str) -> Body:
    """Each asked id as the coordinator holds it: state, producer id and epoch, timeout,
    the open transaction's start in epoch ms (-1 unless one is open or ending) and its
    partitions not yet marked (the marked ones leave as their markers land, as Kafka's
    do); TRANSACTIONAL_ID_NOT_FOUND for an id never initialised. Node 0 coordinates every
    id, so NOT_COORDINATOR is never answered. Versions: v0; not in profiles "2.4" and
    "2.5" (Kafka 3.0's, KIP-664)."""
    states = []
    for txn_id in f.body["transactional_ids"]:
        meta = c.txns.txns.get(txn_id)
        if meta is None:
            states.append(
                {
                    "error_code": codes.TRANSACTIONAL_ID_NOT_FOUND,
                    "transactional_id": txn_id,
                    "transaction_state": "",
                    "transaction_timeout_ms": 0,
                    "transaction_start_time_ms": -1,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topic_partitions": [],
                }
            )
            continue
        open_ = meta.state in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT)
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(meta.partitions if open_ else ()):
            by_topic.setdefault(topic, []).append(p)
        states.append(
            {
                "error_code": codes.NONE,
                "transactional_id": txn_id,
                "transaction_state": meta.state,
                "transaction_timeout_ms": meta.timeout_ms,
                "transaction_start_time_ms": int(meta.started_ms) if open_ else -1,
                "producer_id": meta.producer_id,
                "producer_epoch": meta.epoch,
                "topic_partitions": [
                    {"name": t, "partition_indexes": ps} for t, ps in by_topic.items()
                ],
            }
        )
    return {"throttle_time_ms": 0, "transaction_states": states}
