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

from fleet import Fleet, chaos_env, chaos_schedule, seed, until_committed
from kit import create_topic

from eosflow.testing import check_exactly_once
from eosflow.testing._ladder import Broker

RECORDS, IN_PARTS, OUT_PARTS, INSTANCES = 20_000, 6, 3, 3


async def test_exactly_once_under_kills_restarts_and_a_zombie(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    rng = random.Random(20261122)
    src, dst, group = b.unique("chaos-in"), b.unique("chaos-out"), b.unique("chaos-g")
    await create_topic(b.bootstrap_servers, src, IN_PARTS)
    await create_topic(b.bootstrap_servers, dst, OUT_PARTS)
    await seed(b.bootstrap_servers, src, RECORDS)
    session_s = max(b.min_session_timeout_s, 2.0)
    fleet = Fleet(b.bootstrap_servers, src, dst, group, b.unique("chaos"), chaos_env(session_s))
    for i in range(INSTANCES):
        await fleet.start(i)
    events: list[str] = []
    try:
        await chaos_schedule(fleet, rng, INSTANCES, session_s, events)
        await until_committed(fleet, IN_PARTS, RECORDS, 180, events)
    finally:
        codes = await fleet.stop_all()
    assert codes == [0] * INSTANCES, f"exit codes {codes}; events {events}"
    report = await check_exactly_once(b.bootstrap_servers, src, dst, match="key", group_id=group)
    assert report.ok, report.summary() + f"\nevents: {events}"
    assert report.inputs == RECORDS
