"""`eosflow run` as a service: graceful SIGTERM, fatal errors, bad config; examples."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from aiokafka import AIOKafkaProducer
from kit import eventually

from eosflow.testing import FakeCluster, check_exactly_once

ROOT = Path(__file__).parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOSFLOW_")}
    env.update(
        PYTHONPATH=str(ROOT),
        EOSFLOW_SESSION_TIMEOUT_S="6",
        EOSFLOW_HEARTBEAT_INTERVAL_S="0.3",
        EOSFLOW_TRANSACTION_TIMEOUT_S="5",
        **extra,
    )
    return env


async def _run(*args: str, **env: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eosflow",
        "--log-level",
        "warning",
        *args,
        env=_env(**env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _seed(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    for i, v in enumerate(values):
        await p.send(topic, v, key=f"k{i}".encode())
    await p.stop()


async def test_sigterm_commits_leaves_and_exits_zero(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    c.create_topic("in", 2)
    c.create_topic("in-copy", 1)
    await _seed(c.bootstrap_servers, "in", [f"v{i}".encode() for i in range(500)])
    proc = await _run(
        "run",
        "examples.passthrough:PassThrough",
        "--bootstrap-servers",
        c.bootstrap_servers,
        "--group-id",
        "g",
        "--input-topic",
        "in",
        "--transactional-id",
        "cli-1",
    )

    async def caught_up() -> bool:
        g = c.groups.get("g")
        return g is not None and sum(o for o, _ in g.offsets.values()) == 500

    await eventually(caught_up, timeout_s=60, what="service processed everything")
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    g = c.groups.get("g")
    assert g is not None and not g.members, "left the group on SIGTERM"
    report = await check_exactly_once(c.bootstrap_servers, "in", "in-copy", group_id="g")
    assert report.ok, report.summary()


async def test_fenced_instance_exits_nonzero_with_one_line(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    c.create_topic("in", 1)
    await _seed(c.bootstrap_servers, "in", [b"x"])
    first = await _run(
        "run",
        "examples.passthrough:PassThrough",
        "--bootstrap-servers",
        c.bootstrap_servers,
        "--group-id",
        "g",
        "--input-topic",
        "in",
        "--transactional-id",
        "same",
    )

    async def running() -> bool:
        return "same" in c.txns.txns

    await eventually(running, timeout_s=30, what="first instance initialised")
    usurper = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id="same")
    await usurper.start()
    await _seed(c.bootstrap_servers, "in", [b"y"])  # gives the first instance work to fail on
    _, err = await asyncio.wait_for(first.communicate(), 60)
    await usurper.stop()
    assert first.returncode == 1
    lines = [ln for ln in err.decode().splitlines() if ln.startswith("eosflow:")]
    assert len(lines) == 1 and "fenced" in lines[0], err.decode()


async def test_bad_config_exits_two_naming_the_field() -> None:
    proc = await _run(
        "run",
        "examples.passthrough:PassThrough",
        "--bootstrap-servers",
        "x:1",
        "--group-id",
        "g",
        "--input-topic",
        "in",
        "--transactional-id",
        "t",
        EOSFLOW_COMMIT_INTERVAL_S="-1",
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and "commit_interval_s" in err.decode()
    proc = await _run(
        "run",
        "examples.passthrough:Nope",
        "--bootstrap-servers",
        "x:1",
        "--group-id",
        "g",
        "--input-topic",
        "in",
        "--transactional-id",
        "t",
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and "Processor subclass" in err.decode()


async def test_embedded_example_runs_as_written() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "embedded.py"),
        env=_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert "EXACTLY ONCE: OK" in out.decode()


async def test_enrich_example_dead_letters_unknown_customers(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    for t in ("orders", "orders-enriched", "orders-dlq"):
        c.create_topic(t, 1)
    orders = [f'{{"id": {i}, "customer": "c{i % 4}"}}'.encode() for i in range(40)]
    await _seed(c.bootstrap_servers, "orders", orders)  # c0 is unknown: 10 dead letters
    proc = await _run(
        "run",
        "examples.enrich:EnrichOrders",
        "--bootstrap-servers",
        c.bootstrap_servers,
        "--group-id",
        "e",
        "--input-topic",
        "orders",
        "--transactional-id",
        "e-1",
        "--dead-letter-topic",
        "orders-dlq",
    )

    async def caught_up() -> bool:
        g = c.groups.get("e")
        return g is not None and sum(o for o, _ in g.offsets.values()) == 40

    await eventually(caught_up, timeout_s=60, what="all orders handled")
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    enriched = c.topics["orders-enriched"][0].high_watermark
    dlq = c.topics["orders-dlq"][0].high_watermark
    assert enriched > 0 and dlq > 0
    from eosflow.testing import read_topic

    assert len(await read_topic(c.bootstrap_servers, "orders-enriched")) == 30
    assert len(await read_topic(c.bootstrap_servers, "orders-dlq")) == 10
