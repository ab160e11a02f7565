"""`eosflow run --metrics-port 0 --log-format json` as a service: its port is logged, its
metrics and probes answer, its log lines (progress included) are JSON objects."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path

from aiokafka import AIOKafkaProducer
from kit import eventually
from test_metrics import get

from eosflow.testing import FakeCluster

ROOT = Path(__file__).parents[2]


async def test_run_serves_metrics_and_logs_json(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    c.create_topic("in", 2)
    c.create_topic("in-copy", 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await p.start()
    await asyncio.gather(*[await p.send("in", b"v%d" % i) for i in range(300)])
    await p.stop()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOSFLOW_")}
    env |= {"PYTHONPATH": str(ROOT), "EOSFLOW_SESSION_TIMEOUT_S": "6"}
    env |= {"EOSFLOW_HEARTBEAT_INTERVAL_S": "0.3", "EOSFLOW_TRANSACTION_TIMEOUT_S": "5"}
    argv = [sys.executable, "-m", "eosflow", "--log-format", "json", "run"]
    argv += ["examples.passthrough:PassThrough", "--bootstrap-servers", c.bootstrap_servers]
    argv += ["--group-id", "g", "--transactional-id", "ops-1", "--input-topic", "in"]
    argv += ["--metrics-port", "0", "--progress-interval-s", "0.5"]
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    entries: list[dict[str, object]] = []

    async def read() -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:
            entries.append(json.loads(line))  # every line one JSON object

    reader = asyncio.create_task(read())
    try:

        async def port_logged() -> bool:
            assert proc.returncode is None, entries
            return any("metrics and health probes on" in str(e["message"]) for e in entries)

        await eventually(port_logged, timeout_s=30, what="the metrics port logged")
        message = next(str(e["message"]) for e in entries if "health probes" in str(e["message"]))
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", message)
        assert found, message
        port = int(found.group(1))

        async def all_consumed() -> bool:
            status, text = await asyncio.to_thread(get, port, "/metrics")
            return status == 200 and "eosflow_records_consumed_total 300.0" in text

        await eventually(all_consumed, timeout_s=60, what="300 records in /metrics")

        async def ready() -> bool:  # lag is sampled about once a second
            return await asyncio.to_thread(get, port, "/readyz") == (200, "ready: caught up\n")

        await eventually(ready, timeout_s=10, what="ready: caught up")
        assert await asyncio.to_thread(get, port, "/livez") == (200, "live\n")
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
        await reader
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        reader.cancel()
    assert proc.returncode == 0
    progress = [e["progress"] for e in entries if "progress" in e]
    assert sum(p["records"] for p in progress) == 300  # type: ignore[index]
    assert all(e["logger"] and e["level"] and e["time"] for e in entries)
