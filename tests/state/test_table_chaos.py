"""A join under chaos: three `eosflow run` instances of ``examples/customers.py``'s join
(``tests/procs/slow_join.py``) over a backlog of orders and customer rows racing each
other in time, with SIGKILLs and restarts -- every other one with the instance's local
state wiped, so its tables are rebuilt from the topic -- a SIGSTOPped zombie past its
session, and the rebalances they cause (``tests/fleet.py``'s schedule). Partitions and
their tables move between instances and back. Afterwards every order must be in the
committed output exactly once, joined with the row the two topics' records and
timestamps alone give it (``eosflow.testing.expected_join``).

Found 2026-11-28: the stalls some schedules gave on genuine Kafka 4.4.0 (at about 3,260 of
3,600) were the test's: its records were stamped from 1970's ms 0, and the broker's
retention check deleted both topics mid-run (``Fetch offset 513 is out of range``). The
records now start at ``kit.T0_MS``, and the test cluster deletes such logs too
(``tests/contract/test_fetch.py``), so this run failed on it as on the genuine broker."""

from __future__ import annotations

import os
import random
import shutil
import signal
from pathlib import Path

from fleet import Fleet, chaos_env, chaos_schedule, until_committed
from kit import broker_has_kip360, create_topic, eventually
from test_tables import Names, check_join, history, produce

from eosflow._state._local import instance_dir
from eosflow.testing._ladder import Broker

PARTS, KEYS, VERSIONS, INSTANCES = 6, 10, 60, 3


class WipingFleet(Fleet):
    """A fleet whose every other kill also deletes the instance's local state."""

    kills = 0

    async def kill_and_restart(self, i: int, events: list[str]) -> None:
        self.kills += 1
        wipe = self.kills % 2 == 0
        state = instance_dir(self.env["EOSFLOW_STATE_DIR"], self.group, self.transactional_id(i))
        if wipe:  # an instance just restarted makes its state once assigned: wait for it
            # (CI's stage on 2.4.1 killed one before, and found nothing to wipe)
            async def made() -> bool:
                return state.exists()

            await eventually(made, timeout_s=60, what=f"instance {i}'s local state")
        self.signal(i, signal.SIGKILL)
        await self.procs[i].wait()
        if wipe:
            events.append(f"wiped the state of {i}")
            shutil.rmtree(state)
        await self.start(i)


async def test_the_join_is_the_inputs_under_kills_wipes_and_a_zombie(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b, n = eosflow_broker, Names.of(eosflow_broker)
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "20261127")))  # another schedule
    for topic in (n.orders, n.customers, n.out):
        await create_topic(b.bootstrap_servers, topic, PARTS)
    rows, orders = history(partitions=PARTS, keys=KEYS, versions=VERSIONS)
    await produce(b.bootstrap_servers, n.customers, rows)
    await produce(b.bootstrap_servers, n.orders, orders)
    session_s = max(b.min_session_timeout_s, 2.0)
    env = chaos_env(session_s) | {
        "EOSFLOW_STATE_DIR": str(tmp_path),
        "EOSFLOW_APP_CUSTOMERS_TOPIC": n.customers,  # examples/customers.py's setting
        "CHAOS_DELAY_S": "0.01",  # ~12 s of orders over three instances: chaos lands mid-run
    }
    fleet = WipingFleet(
        b.bootstrap_servers,
        n.orders,
        n.out,
        n.group,
        b.unique("tchaos"),
        env,
        target="slow_join:SlowJoin",
        restart_fenced=not await broker_has_kip360(b.bootstrap_servers),
    )
    for i in range(INSTANCES):
        await fleet.start(i)
    events: list[str] = []
    try:
        await chaos_schedule(fleet, rng, INSTANCES, session_s, events)
        await fleet.check_alive(events)
        await until_committed(fleet, PARTS, len(orders), 180, events)
    finally:
        codes = await fleet.stop_all()
    assert all(c == 0 or fleet.exit_allowed(c) for c in codes), f"exit codes {codes}; {events}"
    assert "wiped the state" in " ".join(events), events
    await check_join(b, n, len(orders))
