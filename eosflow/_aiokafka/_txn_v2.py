"""Transactions v2 (KIP-890 part 2) on aiokafka's producer, which speaks only v1.

``use_transactions_v2`` switches one started producer over, on a cluster that finalizes
``transaction.version`` >= 2 (``Capabilities.txn_v2``):

- **Partitions join with their first write.** The transaction manager marks a partition
  added at once -- no AddPartitionsToTxn, nothing muted waiting for one -- and the
  sender's produce requests go at v12, which asks the partition's leader to add it.
  CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written)
  is retried like any retriable produce error.
- **Every EndTxn bumps the epoch.** EndTxn goes at v5; its answer's producer id and epoch
  replace the producer's, and sequences start again at 0, so the next transaction runs
  under the new epoch and a zombie's late write at the old one is refused by the broker.
  An EndTxn resent with the previous epoch is answered the same outcome again (genuine
  4.4.0), so aiokafka's own resend of an EndTxn that timed out stays safe.
- **Offsets join with their commit.** ``commit_offsets_in_txn`` sends TxnOffsetCommit v5
  and no AddOffsetsToTxn (``transactions_v2(producer)`` tells it).

Failure modes: as v1's. An EndTxn whose answer never comes leaves the outcome unknown and
the session recovers through KIP-360 (InitProducerId naming the producer's id and epoch:
genuine 4.4.0 answers a past epoch with the current one, so a commit that did happen is
found, not redone). ``EosConfig.transactions_v2`` ("auto" by default: where the cluster
finalizes it, ``_protocols``) turns it on: the broker then closes the hanging-transaction
and zombie-write holes itself.
"""

from __future__ import annotations

import collections
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import ConcurrentTransactions, IllegalOperation, KafkaError, ProducerFenced
from aiokafka.producer.sender import EndTxnHandler, SendProduceReqHandler
from aiokafka.producer.transaction_manager import PidAndEpoch

from .._protocol import codes, specs, wire

_V2 = "_eosflow_transactions_v2"  # set on a producer switched over


def use_transactions_v2(producer: AIOKafkaProducer, on: bool) -> bool:
    """Switch a started transactional ``producer`` to transactions v2 if ``on`` (the
    broker has it, ``Capabilities.txn_v2``, and the config asks for it); returns whether
    it did."""
    if not on or transactions_v2(producer):
        return False
    sender, txn = producer._sender, producer._txn_manager

    def add_at_once(tp: TopicPartition) -> None:
        if txn.transactional_id is None:
            return
        if not txn.is_in_transaction():
            # refused as aiokafka's v1 path refuses it: under v2 it would join the next one
            raise IllegalOperation("a write outside a transaction")
        txn._txn_partitions.add(tp)  # Produce v12 adds it at the broker

    async def send_produce(node_id: int, batches: dict[TopicPartition, Any]) -> None:
        await _ProduceV12(sender, batches).do(node_id)
        sender._in_flight.remove(node_id)
        for tp in batches:
            sender._muted_partitions.remove(tp)

    async def end_txn(commit_result: Any) -> None:
        await sender._message_accumulator.flush_for_commit()
        if txn.is_empty_transaction():
            txn.complete_transaction()
            return
        node_id = await sender._find_coordinator(_TRANSACTION, txn.transactional_id)
        await _EndTxnV5(sender, commit_result).do(node_id)

    txn.maybe_add_partition_to_txn = add_at_once
    sender._send_produce_req = send_produce
    sender._do_txn_commit = end_txn
    setattr(producer, _V2, True)
    return True


def transactions_v2(producer: AIOKafkaProducer) -> bool:
    """Whether ``producer`` was switched to transactions v2."""
    return bool(getattr(producer, _V2, False))


_TRANSACTION = 1  # aiokafka's CoordinationType.TRANSACTION


class _ProduceV12(SendProduceReqHandler):  # type: ignore[misc]
    """aiokafka's produce handler at v12 (eosflow's declaration of the request)."""

    def create_request(self) -> Any:
        topics: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for tp, batch in self._batches.items():
            topics[tp.topic].append(
                {"partition": tp.partition, "messages": batch.get_data_buffer()}
            )
        body = {
            "transactional_id": self._sender._txn_manager.transactional_id,
            "required_acks": self._sender._acks,
            "timeout": self._sender._request_timeout_ms,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }
        req = wire.SpecRequest.of(specs.PRODUCE, body, min_version=12, max_version=12)
        req.required_acks = self._sender._acks  # what the handler checks for acks=0
        return req

    def handle_response(self, response: Any) -> Any:
        return super().handle_response(_AsV8(response.to_object()))

    def _can_retry(self, error: KafkaError, batch: Any) -> bool:
        return isinstance(error, ConcurrentTransactions) or bool(super()._can_retry(error, batch))


class _AsV8:
    """A v12 answer in the shape aiokafka's handler reads (its v8 tuples)."""

    API_VERSION = 8

    def __init__(self, answer: dict[str, Any]) -> None:
        self.topics = [
            (
                t["topic"],
                [
                    (
                        p["partition"],
                        p["error_code"],
                        p["offset"],
                        p["timestamp"],
                        p["log_start_offset"],
                        [
                            (e["batch_index"], e["batch_index_error_message"])
                            for e in p["record_errors"]
                        ],
                        p["error_message"],
                    )
                    for p in t["partitions"]
                ],
            )
            for t in answer["topics"]
        ]


class _EndTxnV5(EndTxnHandler):  # type: ignore[misc]
    """aiokafka's EndTxn handler at v5: a success adopts the answered producer id and
    epoch (sequences start at 0); every other answer is handled as aiokafka does, with
    PRODUCER_FENCED (v2+) fencing."""

    def create_request(self) -> Any:
        txn = self._sender._txn_manager
        body = {
            "transactional_id": txn.transactional_id,
            "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch,
            "transaction_result": bool(self._commit_result),
        }
        return wire.SpecRequest.of(specs.END_TXN, body, min_version=5, max_version=5)

    def handle_response(self, resp: Any) -> Any:
        txn = self._sender._txn_manager
        if resp.error_code == 0:
            if resp.producer_id >= 0 and resp.producer_epoch >= 0:
                txn._pid_and_epoch = PidAndEpoch(resp.producer_id, resp.producer_epoch)
                txn._sequence_numbers.clear()  # a new epoch's sequences start at 0
            txn.complete_transaction()
            return None
        if resp.error_code == codes.PRODUCER_FENCED:
            raise ProducerFenced()
        return super().handle_response(resp)
