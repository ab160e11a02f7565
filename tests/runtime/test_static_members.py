"""Static membership (KIP-345, ``group_instance_id``) under both group protocols, on the
test cluster: an instance that stops and starts again within its session keeps its
partitions, and the other member's are untouched meanwhile. The protocols' own rules are
held against genuine Kafka by ``tests/contract/test_group_rules.py`` (classic) and
``tests/contract/test_consumer_group_protocol.py`` (consumer)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from test_consumer_protocol import committed_all, seed
from test_mechanisms import Gate, assert_exactly_once, cfg, until

import eosflow
from eosflow.testing import FakeCluster

Partition = tuple[str, int]


def held_by(c: FakeCluster, instance: str | None) -> set[Partition]:
    """What the members of ``instance`` (None: the dynamic ones) hold as the coordinator
    sees it: assigned or pending revocation (consumer), the last assignment (classic)."""
    g = c.groups.get("g")
    if g is None:
        return set()
    if g.modern is not None:
        return {
            tp
            for m in g.modern.members.values()
            if m.instance_id == instance
            for tp in m.assigned | m.revoking
        }
    out: set[Partition] = set()
    for m in g.members.values():
        if m.instance_id == instance and m.assignment:
            decoded = ConsumerProtocolMemberAssignment.decode(m.assignment)
            out |= {(t, p) for t, parts in decoded.assignment for p in parts}
    return out


# Mutations caught: under the consumer protocol, leaving with epoch -1 whatever the
# instance id (`ConsumerGroup.leave`: the other member took the partition); under the
# classic one, a LeaveGroup sent on stop (aiokafka's `_maybe_leave_group` without its
# instance-id check: the group rebalanced and the other member took it).
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_static_member_restarted_within_its_session_keeps_its_partitions(
    eosflow_cluster: FakeCluster, protocol: str
) -> None:
    c = eosflow_cluster
    await seed(c, 2)
    a_cfg = cfg(c, group_protocol=protocol, group_instance_id="instance-a")
    other = eosflow.EosApp(Gate("out"), cfg(c, group_protocol=protocol, transactional_id="tx-2"))
    async with other:
        first = eosflow.EosApp(Gate("out"), a_cfg)
        async with first:

            def one_each() -> bool:
                return len(held_by(c, "instance-a")) == len(held_by(c, None)) == 1

            await until(first, one_each, "one partition each")
            mine, theirs = held_by(c, "instance-a"), held_by(c, None)
        deadline = time.monotonic() + 1.5  # a quarter of the session (6 s)
        while time.monotonic() < deadline:
            assert held_by(c, None) == theirs, "the static member's partition moved"
            assert held_by(c, "instance-a") == mine
            await asyncio.sleep(0.05)
        again = eosflow.EosApp(Gate("out"), a_cfg)
        async with again:
            await until(again, lambda: committed_all(c), "all committed")
            assert held_by(c, "instance-a") == mine and held_by(c, None) == theirs
    await assert_exactly_once(c)
