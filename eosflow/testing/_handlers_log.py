"""The partition log's APIs: Produce, Fetch, ListOffsets, DeleteRecords."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .._protocol import codes
from ._api import Body, handles
from ._broker import Broker
from ._codec import Frame


@handles("Produce")
async def produce(c: Broker, f: Frame, host: str) -> Body:
    """acks other than -1, 0, 1: INVALID_REQUIRED_ACKS for every partition. A partition
    answering an error carries offset and log start offset -1, as Kafka's do. A
    transactional batch must belong to the producer's open transaction (KIP-890 part 1
    verification: INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH for a past epoch); v12 under
    transactions v2 adds its partition to the transaction implicitly (KIP-890 part 2).
    Versions: v0-12; profile "4.0" v3-12 (advertised from v0, as Kafka 4 does), "2.4"
    and "2.5" v0-8."""
    txn_id = f.body.get("transactional_id")
    acks_ok = f.body.get("required_acks", -1) in (-1, 0, 1)
    out = []
    for t in f.body["topics"]:
        parts = []
        for p in t["partitions"]:
            tp = (t["topic"], p["partition"])
            log = c.log(tp)
            code, base = codes.UNKNOWN_TOPIC_OR_PARTITION, -1
            data = p["messages"]
            if not acks_ok:
                code = codes.INVALID_REQUIRED_ACKS
            elif log is not None and data:
                code = codes.NONE
                if txn_id is not None:
                    code = await _verified(c, data, tp, f.version)
                if code == codes.NONE:
                    code, base = log.append(data)
            parts.append(
                {
                    "partition": tp[1],
                    "error_code": code,
                    "offset": base,
                    "timestamp": -1,
                    "log_start_offset": -1 if log is None or code else log.log_start_offset,
                    "record_errors": [],
                    "error_message": None,
                }
            )
        out.append({"topic": t["topic"], "partitions": parts})
    return {"topics": out}


# A transactional write's partition is added by the leader asking the coordinator
# (KIP-890); CONCURRENT_TRANSACTIONS (the last transaction's markers still being written)
# is retried by the leader itself, as Kafka's does (add.partitions.to.txn.retry.backoff
# .ms 20 / .max.ms 100 by default); only past that does the client see it.
_VERIFY_BACKOFF_S, _VERIFY_RETRY_S = 0.02, 0.1


async def _verified(c: Broker, data: bytes, tp: tuple[str, int], version: int) -> int:
    code = c.txn_produce_check(data, tp, version)
    waited = 0.0
    while code == codes.CONCURRENT_TRANSACTIONS and waited < _VERIFY_RETRY_S:
        await asyncio.sleep(_VERIFY_BACKOFF_S)
        waited += _VERIFY_BACKOFF_S
        code = c.txn_produce_check(data, tp, version)
    if code == codes.CONCURRENT_TRANSACTIONS:
        c.txns.concurrent_writes += 1
    return code


@handles("Fetch")
async def fetch(c: Broker, f: Frame, host: str) -> Body:
    """Long poll: waits up to max_wait_time until the partitions hold min_bytes, woken by
    appends and markers; the first batch of a response comes whole even above the byte limits
    (KIP-74). read_committed stops at the last stable offset and lists the aborted
    transactions in range. UNKNOWN_TOPIC_OR_PARTITION, or OFFSET_OUT_OF_RANGE below the log
    start or past the high watermark. No fetch sessions (session id 0). A stale view
    (``FakeCluster.stale_log``) answers the ends it froze, and nothing past them.
    Versions: v0-11; profile "4.0" v4-11 (KIP-896 floor)."""
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


def _fetch_once(c: Broker, body: Body, read_committed: bool) -> tuple[list[Body], int, list[Any]]:
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
                        "error_code": codes.UNKNOWN_TOPIC_OR_PARTITION,
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
            hw, lso = log.answered_ends()
            parts.append(
                {
                    "partition": tp[1],
                    "error_code": code,
                    "highwater_offset": hw,
                    "last_stable_offset": lso,
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


@handles("ListOffsets")
async def list_offsets(c: Broker, f: Frame, host: str) -> Body:
    """Timestamp -1: the high watermark (the last stable offset for read_committed, v2+);
    -2: the log start; any other: the first data record stamped at or after it, with its
    timestamp, or offset and timestamp -1 when there is none. v0 answers in ``offsets``.
    UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist.
    Versions: v0-5; profile "4.0" v1-5 (KIP-896 floor)."""
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
                        "error_code": codes.UNKNOWN_TOPIC_OR_PARTITION,
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                        "offsets": [],
                    }
                )
                continue
            ts, found = p["timestamp"], -1
            if ts == -1:
                hw, lso = log.answered_ends()
                off = lso if read_committed else hw
            elif ts == -2:
                off = log.log_start_offset
            else:  # by time: the record's own timestamp; nothing found has no epoch
                off, found = log.offset_for_timestamp(ts)
            parts.append(
                {
                    "partition": p["partition"],
                    "error_code": 0,
                    "timestamp": found,
                    "offset": off,
                    "leader_epoch": -1 if off == -1 else 0,
                    "offsets": [off],
                }
            )
        out.append({"topic": t["topic"], "partitions": parts})
    return {"topics": out}


@handles("DeleteRecords")
async def delete_records(c: Broker, f: Frame, host: str) -> Body:
    """Moves each partition's log start up to the offset asked (-1: the high watermark),
    never down, and answers the log start as ``low_watermark``; the batches wholly below
    it are dropped (Kafka deletes whole segments; a fetch below the log start is
    OFFSET_OUT_OF_RANGE either way). An offset past the high watermark:
    OFFSET_OUT_OF_RANGE; a partition that does not exist: UNKNOWN_TOPIC_OR_PARTITION.
    Versions: v0-2."""
    out = []
    for t in f.body["topics"]:
        parts = []
        for p in t["partitions"]:
            log = c.log((t["name"], p["partition_index"]))
            code, low = codes.UNKNOWN_TOPIC_OR_PARTITION, -1
            if log is not None:
                offset = log.high_watermark if p["offset"] == -1 else p["offset"]
                if offset < 0 or offset > log.high_watermark:
                    code = codes.OFFSET_OUT_OF_RANGE
                else:
                    code, low = codes.NONE, log.delete_before(offset)
            parts.append(
                {"partition_index": p["partition_index"], "low_watermark": low, "error_code": code}
            )
        out.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": out}
