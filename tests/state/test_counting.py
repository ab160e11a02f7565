"""Stateful processing end to end: the running count (``examples/counting.py``)."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from kit import create_topic, eventually

import eosflow
from eosflow.testing import check_counts
from eosflow.testing._ladder import Broker
from examples.counting import Count


def config(b: Broker, src: str, group: str, state_dir: str, **kw: object) -> eosflow.EosConfig:
    session = max(b.min_session_timeout_s, 1.0) * 6
    base: dict[str, object] = dict(
        bootstrap_servers=b.bootstrap_servers,
        group_id=group,
        input_topics=(src,),
        transactional_id=b.unique("tx"),
        session_timeout_s=session,
        heartbeat_interval_s=session / 10,
        transaction_timeout_s=session * 0.8,
        state_dir=state_dir,
    )
    base.update(kw)
    return eosflow.EosConfig(**base)  # type: ignore[arg-type]


async def seed_keys(bootstrap: str, topic: str, n: int, keys: int) -> None:
    """``n`` records whose keys cycle through ``keys`` distinct ones (k0, k1, ...)."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await p.start()
    try:
        futs = [await p.send(topic, b"x", key=f"k{i % keys}".encode()) for i in range(n)]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def test_counts_are_exactly_once(eosflow_broker: Broker, tmp_path: object) -> None:
    b = eosflow_broker
    src, group = b.unique("words"), b.unique("count")
    dst = f"{src}-counts"
    await create_topic(b.bootstrap_servers, src, 3)
    await create_topic(b.bootstrap_servers, dst, 3)
    await seed_keys(b.bootstrap_servers, src, 3000, 50)
    app = eosflow.EosApp(Count(), config(b, src, group, str(tmp_path)))
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return app.stats.records >= 3000 and app.last_outcome is eosflow.Outcome.COMMITTED

        await eventually(done, timeout_s=60, what="all input counted and committed")
    changelog = f"{group}--{src}--counts--changelog"
    report = await check_counts(b.bootstrap_servers, src, dst, changelog, group_id=group)
    assert report.ok, report.summary()
    assert report.found == 50
