"""Log lines during a broker outage: ``python -m benchmarks outage [--outage-s 20]``.

An eosflow app copies records on the in-process test cluster; halfway through, the
cluster crashes (requests in flight lost, port closed) for ``--outage-s`` seconds and
then comes back on the same port with its state. Every log record of every logger
(eosflow's and aiokafka's, at INFO and above, as ``eosflow run`` logs by default) is
counted while the cluster is down; the run then checks that all records were committed
exactly once. Prints lines per minute of outage, and the five most frequent lines.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import time

from aiokafka import AIOKafkaProducer

import eosflow
from eosflow.testing import FakeCluster, check_exactly_once
from eosflow.testing._ladder import fake_settings


class Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counting = False
        self.lines: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if self.counting:
            text = f"{record.levelname} {record.name}: {record.getMessage()}"
            self.lines[text[:140]] += 1


class Copy(eosflow.Processor):
    async def process(self, record: eosflow.Record) -> eosflow.Output:
        await asyncio.sleep(0.002)
        return eosflow.Output("out", record.value, key=record.key)


async def main(outage_s: float, records: int) -> None:
    counter = Counter()
    logging.basicConfig(level=logging.INFO, handlers=[counter])
    async with FakeCluster(fake_settings()) as c:
        c.create_topic("in", 3)
        c.create_topic("out", 3)
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
        await p.start()
        await asyncio.gather(
            *[await p.send("in", f"v{i}".encode(), key=f"k{i}".encode()) for i in range(records)]
        )
        await p.stop()
        config = eosflow.EosConfig(
            bootstrap_servers=c.bootstrap_servers,
            group_id="g",
            input_topics=("in",),
            transactional_id="outage-1",
            session_timeout_s=30.0,
            transaction_timeout_s=20.0,
            heartbeat_interval_s=1.0,
        )
        app = eosflow.EosApp(Copy(), config)
        async with app:
            while sum(c.committed("g", "in").values()) < records // 2:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            counter.counting = True
            started = time.monotonic()
            await c.crash()
            await asyncio.sleep(outage_s)
            counter.counting = False
            down = time.monotonic() - started
            await c.start()
            deadline = time.monotonic() + 120
            while sum(c.committed("g", "in").values()) < records:
                assert app.failure is None, app.failure
                assert time.monotonic() < deadline, "no recovery after the outage"
                await asyncio.sleep(0.1)
        report = await check_exactly_once(c.bootstrap_servers, "in", "out", group_id="g")
    total = sum(counter.lines.values())
    print(f"outage {down:.1f} s: {total} log lines, {total / down * 60:.0f} lines per minute")
    for line, n in counter.lines.most_common(5):
        print(f"  {n:6d}  {line}")
    print(report.summary())


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outage-s", type=float, default=20.0)
    ap.add_argument("--records", type=int, default=4000)
    args = ap.parse_args()
    asyncio.run(main(args.outage_s, args.records))
