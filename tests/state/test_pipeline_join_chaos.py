"""A join after regrouping both sides (``examples/regroup_paid.py``) under the chaos
schedule of ``tests/fleet.py``: three ``eosflow run`` instances, one SIGKILLed and
restarted, one SIGSTOPped past its session (a zombie), one more SIGKILLed. The orders
sit on 4 hand-placed partitions and the payments on 2; both are regrouped by order id
into two repartition topics of one size, whose partition p goes, with its two stores,
to one instance. Every paid order must be written exactly once, ``[order, pay]``: a
pair lost (a store restored behind its input, a regrouped record committed without the
offsets that produced it) or written twice (a store or an offset restored behind the
other) shows as a count other than one."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from pathlib import Path

from fleet import Fleet, chaos_env, run_chaos
from kit import broker_has_kip360, create_topic
from test_pipeline_tables import seed_orders_and_payments

from eosflow._checks._checker import read_records
from eosflow.testing._ladder import Broker

ORDERS, ORDER_PARTS, PAYMENT_PARTS, INSTANCES = 12_000, 4, 2, 3


async def test_the_regrouped_join_pairs_each_order_once_under_kills_and_a_zombie(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    bs = b.bootstrap_servers
    orders, payments, dst = (
        b.unique("pchaos-orders"),
        b.unique("pchaos-pay"),
        b.unique("pchaos-out"),
    )
    group = b.unique("pchaos-g")
    await create_topic(bs, orders, ORDER_PARTS)
    await create_topic(bs, payments, PAYMENT_PARTS)
    await create_topic(bs, dst, 3)
    await seed_orders_and_payments(bs, orders, payments, ORDERS, ORDER_PARTS, PAYMENT_PARTS)
    wanted = Counter((i, f"pay{i}") for i in range(ORDERS) if i % 4)
    session_s = max(b.min_session_timeout_s, 2.0)
    env = chaos_env(session_s) | {
        "EOSFLOW_STATE_DIR": str(tmp_path),
        "EOSFLOW_APP_ORDERS": orders,
        "EOSFLOW_APP_PAYMENTS": payments,
        "EOSFLOW_APP_OUTPUT": dst,
    }
    fleet = Fleet(
        bs,
        orders,
        dst,
        group,
        b.unique("pchaos"),
        env,
        target="slow_regroup_paid:SlowPaid",
        restart_fenced=not await broker_has_kip360(bs),
        log_dir=tmp_path,
        inputs=(orders, payments),
    )

    async def pairs() -> Counter[tuple[int, str]]:
        out = await read_records(bs, dst, committed_only=True)
        return Counter(tuple(json.loads(r.value or b"null")) for r in out)

    async def settle(fleet: Fleet) -> None:
        """Until every pair is written (the payments and both regroups too), or none
        more for 20 s: ``check`` then says what is missing."""
        seen, since = -1, time.monotonic()
        while (now := sum((await pairs()).values())) < len(wanted):
            if now != seen:
                seen, since = now, time.monotonic()
            elif time.monotonic() - since > 20:
                return
            await asyncio.sleep(0.5)

    async def check(fleet: Fleet) -> None:
        got = await pairs()
        twice = sorted(k for k, n in got.items() if n > 1)
        lost = sorted(k for k in wanted if k not in got)
        strays = sorted(k for k in got if k not in wanted)
        assert got == wanted, (
            f"{len(twice)} pairs written twice {twice[:5]}, {len(lost)} lost {lost[:5]}, "
            f"{len(strays)} strays {strays[:5]}"
        )

    await run_chaos(
        fleet, random.Random(20261203), INSTANCES, session_s, ORDER_PARTS, ORDERS, check, settle
    )
