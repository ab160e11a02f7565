"""Exactly-once state under chaos: three `eosflow run` instances of the running count
(``tests/procs/slow_count.py``), SIGKILLs and restarts, a SIGSTOPped zombie past its
session, the rebalances they cause (``tests/fleet.py``'s schedule, as the stateless
chaos test). Partitions move between instances and back, restores run and are cut
short by kills. Afterwards the count of every key must equal its number of input
records, the outputs of each key must be exactly 1..n, the committed changelog must
show no aborted write, and the group's offsets must be at the input's end. The broker
side of the chaos, on three genuine brokers, is in ``tests/genuine/test_chaos_brokers.py``.
"""

from __future__ import annotations

import random
from pathlib import Path

from fleet import Fleet, chaos_env, run_chaos
from kit import broker_has_kip360, create_topic
from stateful import counts_ok, seed_keys

from eosflow.testing._ladder import Broker

RECORDS, KEYS, IN_PARTS, OUT_PARTS, INSTANCES = 20_000, 500, 6, 3, 3


async def test_counts_exactly_once_under_kills_restarts_and_a_zombie(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    rng = random.Random(20261125)
    src, dst, group = b.unique("schaos-in"), b.unique("schaos-out"), b.unique("schaos-g")
    await create_topic(b.bootstrap_servers, src, IN_PARTS)
    await create_topic(b.bootstrap_servers, dst, OUT_PARTS)
    await seed_keys(b.bootstrap_servers, src, RECORDS, KEYS)
    session_s = max(b.min_session_timeout_s, 2.0)
    env = chaos_env(session_s) | {"EOSFLOW_STATE_DIR": str(tmp_path)}
    # without KIP-360 the zombie is fenced when the broker timed its transaction out while
    # it was stopped: fatal by design (exit 3), and restarted as a supervisor would
    fleet = Fleet(
        b.bootstrap_servers,
        src,
        dst,
        group,
        b.unique("schaos"),
        env,
        target="slow_count:SlowCount",
        restart_fenced=not await broker_has_kip360(b.bootstrap_servers),
    )

    async def check(fleet: Fleet) -> None:
        report = await counts_ok(b.bootstrap_servers, src, group, output=dst)
        assert report.found == KEYS

    await run_chaos(fleet, rng, INSTANCES, session_s, IN_PARTS, RECORDS, check)
