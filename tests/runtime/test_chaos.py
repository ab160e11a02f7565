"""Exactly-once under chaos: three `eosflow run` processes, SIGKILLs and a zombie.

A seeded schedule SIGKILLs and restarts instances and SIGSTOPs one past its session
timeout before SIGCONTing it (it wakes as a zombie with a stale generation and, likely,
a transaction the broker has timed out). Afterwards a read_committed reader must find
every input exactly once and the group's offsets must have reached the input's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from kit import create_topic

from eosflow.testing import check_exactly_once, spawn_run
from eosflow.testing._ladder import Broker

ROOT = Path(__file__).parents[2]
RECORDS, IN_PARTS, OUT_PARTS, INSTANCES = 20_000, 6, 3, 3


class Fleet:
    def __init__(self, b: Broker, src: str, dst: str, group: str, session_s: float) -> None:
        self.b, self.src, self.dst, self.group, self.session_s = b, src, dst, group, session_s
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.run_id = b.unique("chaos")

    async def start(self, i: int) -> None:
        self.procs[i] = await spawn_run(
            "slow_copy:SlowCopy",
            bootstrap_servers=self.b.bootstrap_servers,
            group_id=self.group,
            input_topics=(self.src,),
            transactional_id=f"{self.run_id}-{i}",
            env={
                "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'procs'}",
                "CHAOS_OUT": self.dst,
                "EOSFLOW_SESSION_TIMEOUT_S": str(self.session_s),
                "EOSFLOW_HEARTBEAT_INTERVAL_S": str(self.session_s / 10),
                "EOSFLOW_TRANSACTION_TIMEOUT_S": str(self.session_s * 0.8),
            },
        )

    def signal(self, i: int, sig: signal.Signals) -> None:
        self.procs[i].send_signal(sig)

    async def kill_and_restart(self, i: int) -> None:
        self.signal(i, signal.SIGKILL)
        await self.procs[i].wait()
        await self.start(i)

    async def stop_all(self) -> list[int | None]:
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):  # may have exited, not reaped
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        return [await asyncio.wait_for(p.wait(), 60) for p in self.procs.values()]


async def committed_total(b: Broker, topic: str, group: str) -> int:
    c = AIOKafkaConsumer(
        bootstrap_servers=b.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    await c.start()
    try:
        return sum([await c.committed(TopicPartition(topic, p)) or 0 for p in range(IN_PARTS)])
    finally:
        await c.stop()


async def test_exactly_once_under_kills_restarts_and_a_zombie(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    rng = random.Random(20261122)
    src, dst, group = b.unique("chaos-in"), b.unique("chaos-out"), b.unique("chaos-g")
    await create_topic(b.bootstrap_servers, src, IN_PARTS)
    await create_topic(b.bootstrap_servers, dst, OUT_PARTS)
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, linger_ms=5)
    await p.start()
    await asyncio.gather(
        *[await p.send(src, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(RECORDS)]
    )
    await p.stop()
    session_s = max(b.min_session_timeout_s, 2.0)
    fleet = Fleet(b, src, dst, group, session_s)
    for i in range(INSTANCES):
        await fleet.start(i)
    events: list[str] = []
    try:
        # the schedule: kill+restart, zombie, kill+restart, each after a random pause
        await asyncio.sleep(rng.uniform(1.5, 2.5))
        victim = rng.randrange(INSTANCES)
        events.append(f"SIGKILL+restart {victim}")
        await fleet.kill_and_restart(victim)
        await asyncio.sleep(rng.uniform(1.0, 2.0))
        zombie = rng.choice([i for i in range(INSTANCES) if i != victim])
        events.append(f"SIGSTOP {zombie} for {session_s * 1.5:.1f} s")
        fleet.signal(zombie, signal.SIGSTOP)
        await asyncio.sleep(session_s * 1.5)  # past its session timeout: it is evicted
        fleet.signal(zombie, signal.SIGCONT)
        events.append(f"SIGCONT {zombie}")
        await asyncio.sleep(rng.uniform(0.5, 1.5))
        victim = rng.randrange(INSTANCES)
        events.append(f"SIGKILL+restart {victim}")
        await fleet.kill_and_restart(victim)
        deadline = time.monotonic() + 180
        while await committed_total(b, src, group) < RECORDS:
            assert time.monotonic() < deadline, f"stalled; events: {events}"
            for i, proc in fleet.procs.items():
                assert proc.returncode is None, f"instance {i} died ({proc.returncode}); {events}"
            await asyncio.sleep(0.5)
    finally:
        codes = await fleet.stop_all()
    assert codes == [0] * INSTANCES, f"exit codes {codes}; events {events}"
    report = await check_exactly_once(b.bootstrap_servers, src, dst, match="key", group_id=group)
    assert report.ok, report.summary() + f"\nevents: {events}"
    assert report.inputs == RECORDS
