"""The transaction coordinator's APIs: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _codes as E
from ._api import Body, by_topic, handles, tp_offsets

if TYPE_CHECKING:
    from ._cluster import FakeCluster
    from ._codec import Frame


@handles("InitProducerId")
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


@handles("AddPartitionsToTxn")
async def add_partitions_to_txn(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    tps = [(t["name"], p) for t in b["topics"] for p in t["partitions"]]
    results = c.txns.add_partitions(
        b["transactional_id"], b["producer_id"], b["producer_epoch"], tps, f.version
    )
    return {"results": by_topic(results, "name", "results", "partition_index")}


@handles("AddOffsetsToTxn")
async def add_offsets_to_txn(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    return {
        "error_code": c.txns.add_offsets(
            b["transactional_id"], b["producer_id"], b["producer_epoch"], b["group_id"], f.version
        )
    }


@handles("TxnOffsetCommit")
async def txn_offset_commit(c: FakeCluster, f: Frame, host: str) -> Body:
    b = f.body
    offsets = tp_offsets(b["topics"])
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
    return {"topics": by_topic(results, "name", "partitions", "partition_index")}


@handles("EndTxn")
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
