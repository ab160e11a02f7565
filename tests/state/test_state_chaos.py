"""Exactly-once state under chaos: three `eosflow run` instances of the running count,
which also counts per key in 10 s tumbling windows and keeps an idle timer per key
(``tests/procs/slow_time.py``), SIGKILLs and restarts, a SIGSTOPped zombie past its
session, the rebalances they cause (``tests/fleet.py``'s schedule, as the stateless
chaos test). Partitions move between instances and back, restores run and are cut
short by kills. Afterwards the count of every key must equal its number of input
records, the outputs of each key must be exactly 1..n, the committed changelog must
show no aborted write, and the group's offsets must be at the input's end; every
window's final and every timer must be emitted exactly once, as the input alone says
(``check_windows``; the timers replayed here). The broker
side of the chaos, on three genuine brokers, is in ``tests/genuine/test_chaos_brokers.py``.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from fleet import Fleet, chaos_env, run_chaos
from kit import broker_has_kip360, create_topic
from slow_time import IDLE_MS, WINDOW
from stateful import counts_ok, seed_keys

from eosflow._checks._checker import read_records
from eosflow.testing import check_windows, read_topic
from eosflow.testing._ladder import Broker

RECORDS, KEYS, IN_PARTS, OUT_PARTS, INSTANCES = 20_000, 500, 6, 3, 3


async def test_counts_exactly_once_under_kills_restarts_and_a_zombie(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    rng = random.Random(20261125)
    src, dst, group = b.unique("schaos-in"), b.unique("schaos-out"), b.unique("schaos-g")
    await create_topic(b.bootstrap_servers, src, IN_PARTS)
    for topic in (dst, f"{dst}-windows", f"{dst}-timers"):
        await create_topic(b.bootstrap_servers, topic, OUT_PARTS)
    # event time: 10 ms a record, one in 20 up to 4 s early (out of order, some late)
    early = {i: rng.randrange(4000) for i in range(RECORDS) if rng.random() < 0.05}
    await seed_keys(
        b.bootstrap_servers, src, RECORDS, KEYS, timestamp_ms=lambda i: 10 * i - early.get(i, 0)
    )
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
        target="slow_time:SlowTime",
        restart_fenced=not await broker_has_kip360(b.bootstrap_servers),
    )

    async def check(fleet: Fleet) -> None:
        report = await counts_ok(b.bootstrap_servers, src, group, output=dst)
        assert report.found == KEYS
        windows = await check_windows(b.bootstrap_servers, src, f"{dst}-windows", WINDOW)
        assert windows.ok and windows.expected > 1000, windows.summary()
        fired = Counter(
            (k, int(v or b""))
            for _p, _o, k, v in await read_topic(b.bootstrap_servers, f"{dst}-timers")
        )
        want = await timers_due(b.bootstrap_servers, src)
        assert fired == want and len(want) > 1000, (
            len(fired),
            len(want),
            fired - want,
            want - fired,
        )

    await run_chaos(fleet, rng, INSTANCES, session_s, IN_PARTS, RECORDS, check)


async def timers_due(bootstrap: str, src: str) -> Counter[tuple[bytes | None, int]]:
    """The idle timers the input gives (``slow_time.py``): per partition in offset order,
    each record moves its key's timer to its time + IDLE_MS; a timer fires once the
    partition's stream time reaches it."""
    records = sorted(await read_records(bootstrap, src), key=lambda r: (r.partition, r.offset))
    fired: Counter[tuple[bytes | None, int]] = Counter()
    stream: dict[int, int] = {}
    pending: dict[int, dict[bytes | None, int]] = {}
    for r in records:
        now = stream[r.partition] = max(stream.get(r.partition, r.timestamp), r.timestamp)
        timers = pending.setdefault(r.partition, {})
        timers[r.key] = r.timestamp + IDLE_MS
        for key in [k for k, due in timers.items() if due <= now]:
            fired[(key, timers.pop(key))] += 1
    return fired
