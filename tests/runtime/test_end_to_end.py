"""The runtime end to end on a broker from the ladder: a pass-through app."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from kit import create_topic, eventually, read_all

import eosflow
from eosflow.testing._ladder import Broker


class Upper(eosflow.Processor):
    def __init__(self, out: str) -> None:
        self.out = out

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        assert record.value is not None
        return eosflow.Output(self.out, record.value.upper(), key=record.key)


def config(b: Broker, src: str, group: str, **kw: object) -> eosflow.EosConfig:
    session = max(b.min_session_timeout_s, 1.0) * 6
    base: dict[str, object] = dict(
        bootstrap_servers=b.bootstrap_servers,
        group_id=group,
        input_topics=(src,),
        transactional_id=b.unique("tx"),
        session_timeout_s=session,
        heartbeat_interval_s=session / 10,
        transaction_timeout_s=session * 0.8,
    )
    base.update(kw)
    return eosflow.EosConfig(**base)  # type: ignore[arg-type]


async def seed(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        futs = [
            await p.send(topic, f"v{i}".encode(), key=str(i).encode(), partition=i % partitions)
            for i in range(n)
        ]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def test_pass_through_is_exactly_once(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    src, dst, group = b.unique("in"), b.unique("out"), b.unique("g")
    await create_topic(b.bootstrap_servers, src, 3)
    await create_topic(b.bootstrap_servers, dst, 2)
    await seed(b.bootstrap_servers, src, 3000, 3)
    app = eosflow.EosApp(Upper(dst), config(b, src, group))
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return app.stats.records >= 3000 and app.last_outcome is eosflow.Outcome.COMMITTED

        await eventually(done, timeout_s=60, what="all input processed and committed")
    out = sorted(v for _, _, v in await read_all(b.bootstrap_servers, dst) if v is not None)
    assert out == sorted(f"V{i}".encode() for i in range(3000))
    assert app.stats.committed >= 1 and app.stats.aborted == 0
