"""``Positions.revoke`` under the consumer protocol (KIP-848), where a revocation may take
some partitions and leave the rest: the open transaction (and the work done ahead of
it) goes on unless it touched what went -- and, for co-partitioned topics (``tasks``),
unless it touched any partition of the same number, whose records read the state of
the one that went (a table's rows, a stream-stream join's other side)."""

from __future__ import annotations

from aiokafka import TopicPartition

import eosflow
from eosflow._engine._positions import Positions

ORDERS, PAYMENTS = TopicPartition("orders", 0), TopicPartition("payments", 0)
OTHER = TopicPartition("orders", 1)


def positions(tasks: bool) -> Positions:
    cfg = eosflow.EosConfig(
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        input_topics=("orders", "payments"),
        transactional_id="t",
    )
    pos = Positions(cfg)
    pos.tasks = tasks
    pos.ready = {ORDERS, PAYMENTS, OTHER}
    pos.committed = {ORDERS: 10, PAYMENTS: 5, OTHER: 7}
    pos.polled = {ORDERS: 12}  # orders[0] polled past its committed offset: in hand
    return pos


# Caught with ``tasks`` ignored in revoke: payments[0] went while orders[0]'s records,
# which read its store, were in hand, and the epoch stayed (the work ahead was adopted
# and its next state_of met a closed store).
def test_revoking_a_partition_whose_sibling_was_touched_moves_the_epoch() -> None:
    pos = positions(tasks=True)
    gone, moved = pos.revoke({PAYMENTS}, consumed={})
    assert gone == {PAYMENTS} and moved and pos.epoch == 1
    assert pos.ready == {ORDERS, OTHER}


def test_without_tasks_only_the_partition_itself_counts() -> None:
    pos = positions(tasks=False)
    gone, moved = pos.revoke({PAYMENTS}, consumed={})
    assert gone == {PAYMENTS} and not moved and pos.epoch == 0


def test_a_task_nothing_was_taken_from_goes_without_moving_the_epoch() -> None:
    pos = positions(tasks=True)
    pos.polled = {}
    gone, moved = pos.revoke({OTHER}, consumed={("orders", 0): 11})
    assert gone == {OTHER} and not moved
    gone, moved = pos.revoke({PAYMENTS}, consumed={("orders", 0): 11})
    assert moved, "orders[0] consumed in the open transaction: its task was touched"
