"""eosflow inside an existing asyncio program.

The program has its own work (here a ticker) and runs an EosApp beside it with
``async with``; leaving the block commits the open transaction and leaves the group.
Without ``EOSFLOW_BOOTSTRAP_SERVERS`` it starts eosflow's embedded test cluster, so it
runs as written: ``python examples/embedded.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from aiokafka import AIOKafkaProducer

import eosflow
from eosflow.testing import FakeCluster, check_exactly_once


class Shout(eosflow.Processor):
    async def process(self, record: eosflow.Record) -> eosflow.Output:
        return eosflow.Output("greetings-loud", (record.value or b"").upper(), key=record.key)


async def ticker(stop: asyncio.Event) -> int:
    """The host program's own periodic work, until told to stop."""
    ticks = 0
    while True:
        try:
            await asyncio.wait_for(stop.wait(), 0.2)
            return ticks
        except TimeoutError:
            ticks += 1


async def main() -> None:
    async with contextlib.AsyncExitStack() as stack:
        bootstrap = os.environ.get("EOSFLOW_BOOTSTRAP_SERVERS")
        if bootstrap is None:
            cluster = await stack.enter_async_context(FakeCluster())
            cluster.create_topic("greetings", 2)
            cluster.create_topic("greetings-loud", 1)
            bootstrap = cluster.bootstrap_servers
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        for i in range(100):
            await producer.send("greetings", f"hello {i}".encode(), key=f"k{i}".encode())
        await producer.stop()

        config = eosflow.EosConfig(
            bootstrap_servers=bootstrap,
            group_id="embedded-demo",
            input_topics=("greetings",),
            transactional_id="embedded-demo-1",
            session_timeout_s=10,
            transaction_timeout_s=8,
        )
        stop = asyncio.Event()
        side = asyncio.create_task(ticker(stop))
        async with eosflow.EosApp(Shout(), config) as app:
            while app.stats.records < 100 or app.last_outcome is not eosflow.Outcome.COMMITTED:
                if app.failure is not None:
                    raise app.failure
                await asyncio.sleep(0.1)
        stop.set()
        await side
        report = await check_exactly_once(
            bootstrap, "greetings", "greetings-loud", group_id="embedded-demo"
        )
        print(f"processed {app.stats.records} records in {app.stats.committed} transactions")
        print(report.summary())


if __name__ == "__main__":
    asyncio.run(main())
