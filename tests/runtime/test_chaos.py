"""Exactly-once under chaos: three `eosflow run` processes, SIGKILLs and a zombie.

A seeded schedule SIGKILLs and restarts instances and SIGSTOPs one past its session
timeout before SIGCONTing it (it wakes as a zombie with a stale generation and, likely,
a transaction the broker has timed out). Afterwards a read_committed reader must find
every input exactly once and the group's offsets must have reached the input's end.
The fleet of instances is ``tests/fleet.py``'s, shared with the broker-side chaos test
on genuine Kafka (``tests/genuine/test_chaos_brokers.py``).
"""

from __future__ import annotations

import random

import pytest
from fleet import Fleet, chaos_env, run_chaos, seed
from kit import broker_has_kip848, broker_has_txn_v2, create_topic

from eosflow.testing._ladder import Broker

RECORDS, IN_PARTS, OUT_PARTS, INSTANCES = 20_000, 6, 3, 3


@pytest.mark.parametrize(
    ("protocol", "txn_v2"), [("classic", False), ("consumer", False), ("consumer", True)]
)
async def test_exactly_once_under_kills_restarts_and_a_zombie(
    eosflow_broker: Broker, protocol: str, txn_v2: bool
) -> None:
    """Under both group protocols: the consumer protocol (KIP-848) where the broker has
    it, with the broker's consumer-group session (6 s on the ladder's brokers); and with
    transactions v2 (KIP-890 part 2) where the cluster has it."""
    b = eosflow_broker
    if protocol == "consumer" and not await broker_has_kip848(b.bootstrap_servers):
        pytest.skip("the broker lacks the consumer group protocol (KIP-848)")
    if txn_v2 and not await broker_has_txn_v2(b.bootstrap_servers):
        pytest.skip("the broker lacks transactions v2 (KIP-890 part 2)")
    rng = random.Random(20261122)
    src, dst, group = b.unique("chaos-in"), b.unique("chaos-out"), b.unique("chaos-g")
    await create_topic(b.bootstrap_servers, src, IN_PARTS)
    await create_topic(b.bootstrap_servers, dst, OUT_PARTS)
    await seed(b.bootstrap_servers, src, RECORDS)
    session_s = max(b.min_session_timeout_s, 2.0)
    env = chaos_env(session_s) | {
        "EOSFLOW_GROUP_PROTOCOL": protocol,
        "EOSFLOW_TRANSACTIONS_V2": str(txn_v2).lower(),
    }
    fleet = Fleet(b.bootstrap_servers, src, dst, group, b.unique("chaos"), env)
    await run_chaos(fleet, rng, INSTANCES, session_s, IN_PARTS, RECORDS)
