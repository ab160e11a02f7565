"""Broker contract: consumer-group failover when a member dies without leaving."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from aiokafka import AIOKafkaConsumer
from kit import create_topic, eventually

from eosflow.testing._ladder import Broker

MEMBER = Path(__file__).parent.parent / "procs" / "group_member.py"


async def test_sigkilled_member_is_evicted_and_survivor_takes_over(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic, group = b.unique("fo"), b.unique("fog")
    await create_topic(b.bootstrap_servers, topic, 4)
    session_ms = int(max(b.min_session_timeout_s, 1.0) * 1000)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(MEMBER),
        b.bootstrap_servers,
        topic,
        group,
        str(session_ms),
        stdout=asyncio.subprocess.PIPE,
    )
    survivor = AIOKafkaConsumer(
        topic,
        bootstrap_servers=b.bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(session_ms // 10, 50),
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.startswith(b"ASSIGNED")
        await survivor.start()

        async def split() -> bool:
            await survivor.getmany(timeout_ms=50)
            return 0 < len(survivor.assignment()) < 4

        await eventually(split, timeout_s=30, what="both members share the partitions")
        proc.send_signal(signal.SIGKILL)
        await proc.wait()

        async def took_over() -> bool:
            await survivor.getmany(timeout_ms=50)
            return len(survivor.assignment()) == 4

        await eventually(
            took_over,
            timeout_s=session_ms / 1000 + 20,
            what="survivor owns all partitions after the session timeout",
        )
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await survivor.stop()
