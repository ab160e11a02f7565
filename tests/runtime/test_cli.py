"""`eosflow run` as a service: graceful SIGTERM, fatal errors, bad config; examples."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from aiokafka import AIOKafkaProducer
from kit import demo, eventually

from eosflow import _aiokafka as ak
from eosflow._security import KafkaSecurity
from eosflow.testing import FakeCluster, check_exactly_once, read_topic, spawn_run

ROOT = Path(__file__).parents[2]
ENV = {
    "PYTHONPATH": str(ROOT),
    "EOSFLOW_SESSION_TIMEOUT_S": "6",
    "EOSFLOW_HEARTBEAT_INTERVAL_S": "0.3",
    "EOSFLOW_TRANSACTION_TIMEOUT_S": "5",
}


async def _instance(
    c: FakeCluster, target: str, group: str, topic: str, txn_id: str, **env: str
) -> asyncio.subprocess.Process:
    return await spawn_run(
        target,
        bootstrap_servers=c.bootstrap_servers,
        group_id=group,
        input_topics=(topic,),
        transactional_id=txn_id,
        env={**ENV, **env},
        capture=True,
    )


async def _seed(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    for i, v in enumerate(values):
        await p.send(topic, v, key=f"k{i}".encode())
    await p.stop()


async def _until_committed(c: FakeCluster, group: str, n: int) -> None:
    async def caught_up() -> bool:
        return sum(c.committed(group).values()) == n

    await eventually(caught_up, timeout_s=60, what=f"{group} committed {n} offsets")


async def _sigterm(proc: asyncio.subprocess.Process) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    return err.decode()


async def test_sigterm_commits_leaves_and_exits_zero(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    c.create_topic("in", 2)
    c.create_topic("in-copy", 1)
    await _seed(c.bootstrap_servers, "in", [f"v{i}".encode() for i in range(500)])
    proc = await _instance(c, "examples.passthrough:PassThrough", "g", "in", "cli-1")
    await _until_committed(c, "g", 500)
    err = await _sigterm(proc)
    assert proc.returncode == 0, err
    g = c.groups.get("g")
    assert g is not None and not g.members, "left the group on SIGTERM"
    report = await check_exactly_once(c.bootstrap_servers, "in", "in-copy", group_id="g")
    assert report.ok, report.summary()


# A stop that cannot end -- the processor is stuck in process() -- ends on a second
# SIGTERM: the app is cancelled, its open transaction aborted, the group left, exit 1
# with one line. Without the second-signal branch in `_serve` the process never exits.
async def test_second_sigterm_cancels_a_stuck_stop(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    c.create_topic("in", 1)
    c.create_topic("out", 1)
    await _seed(c.bootstrap_servers, "in", [f"v{i}".encode() for i in range(20)])
    stuck = tmp_path / "stuck"
    env = {
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'procs'}",
        "CHAOS_OUT": "out",
        "HANG_FILE": str(stuck),
    }
    proc = await spawn_run(
        "hang:Hang",
        bootstrap_servers=c.bootstrap_servers,
        group_id="g",
        input_topics=("in",),
        transactional_id="cli-hang",
        env={**ENV, **env},
        capture=True,
        log_level="info",
    )

    async def hanging() -> bool:
        return stuck.exists()

    try:
        await eventually(hanging, timeout_s=30, what="the processor stuck on a record")
        # two signals sent back to back may reach the process as one (a pending signal is
        # not queued twice), so the second goes once the first was seen
        proc.send_signal(signal.SIGTERM)
        assert proc.stderr is not None
        seen: list[str] = []
        while not any("SIGTERM received" in line for line in seen):
            seen.append((await asyncio.wait_for(proc.stderr.readline(), 30)).decode())
            assert seen[-1], "exited before the first SIGTERM was seen: " + "".join(seen)
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 1, "".join(seen) + err.decode()
    line = err.decode().strip().splitlines()[-1]
    assert "stopped by force on a second SIGTERM; the last transaction: aborted" in line, line
    g = c.groups.get("g")
    assert g is not None and not g.members, "left the group"
    assert c.committed("g") == {} and await read_topic(c.bootstrap_servers, "out") == []


async def test_fenced_instance_exits_nonzero_with_one_line(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    c.create_topic("in", 1)
    await _seed(c.bootstrap_servers, "in", [b"x"])
    first = await _instance(c, "examples.passthrough:PassThrough", "g", "in", "same")

    async def running() -> bool:
        return "same" in c.txns.txns

    await eventually(running, timeout_s=30, what="first instance initialised")
    # a newer instance of the same transactional id, in the group (a bare producer is
    # none: the first would take the id back, _engine/_reinit.py)
    second = await _instance(c, "examples.passthrough:PassThrough", "g", "in", "same")
    try:

        async def joined() -> bool:
            view = await ak.describe_group(c.bootstrap_servers, KafkaSecurity(), "g")
            return sum("-same-" in m.client_id for m in view.members) == 2

        await eventually(joined, timeout_s=30, what="the second instance in the group")
        await _seed(c.bootstrap_servers, "in", [b"y"])  # gives the first instance work to fail on
        _, err = await asyncio.wait_for(first.communicate(), 60)
    finally:
        second.terminate()
        await asyncio.wait_for(second.communicate(), 30)
    assert first.returncode == 3  # fenced has its own exit code
    assert second.returncode == 0  # the newer instance went on
    lines = [ln for ln in err.decode().splitlines() if ln.startswith("eosflow:")]
    assert len(lines) == 1 and "fenced" in lines[0] and "newer member" in lines[0], err.decode()


async def test_bad_config_exits_two_naming_the_field(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    proc = await _instance(
        c, "examples.passthrough:PassThrough", "g", "in", "t", EOSFLOW_COMMIT_INTERVAL_S="-1"
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and "commit_interval_s" in err.decode()
    proc = await _instance(c, "examples.passthrough:Nope", "g", "in", "t")
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and "Processor subclass" in err.decode()


async def test_embedded_example_runs_as_written() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOSFLOW_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "embedded.py"),
        env={**env, **ENV},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert "EXACTLY ONCE: OK" in out.decode()


async def test_the_stateful_demo_checks_its_counts() -> None:
    """``eosflow demo --stateful``: the counting pipeline under a SIGKILL, its final
    counts checked against the ground truth."""
    out = await demo("--stateful", "--records", "5000")
    assert "STATE EXACTLY ONCE: OK -- 97 keys expected, 97 in the changelog" in out


async def test_the_windowed_demo_checks_its_finals() -> None:
    """``eosflow demo --windows``: orders per customer per minute of event time under a
    SIGKILL, each minute's final checked against what the input alone gives."""
    out = await demo("--windows", "--records", "20000")
    # 200 s of event time: minutes 0-2 closed (stream time past 185 s in each partition)
    assert "WINDOWS EXACTLY ONCE: OK -- 291 finals expected, 291 emitted" in out


async def test_the_join_demo_checks_every_orders_row() -> None:
    """``eosflow demo --join``: orders joined with a table of customers under a SIGKILL,
    every order's row checked against what the two topics alone give."""
    out = await demo("--join", "--records", "20000")
    assert "customers table: 2000 rows" in out
    assert "join: 20000 orders, each once with its customer's row of its time: OK" in out


async def test_the_sink_demo_checks_every_row() -> None:
    """``eosflow demo --sink postgres``: the orders into a PostgreSQL table under a
    SIGKILL, every order one row of a table without a unique constraint."""
    out = await demo("--sink", "postgres", "--records", "20000")
    assert "PostgreSQL: 20000 rows in demo_orders, 20000 distinct orders: OK" in out


async def test_enrich_example_dead_letters_unknown_customers(eosflow_cluster: FakeCluster) -> None:
    c = eosflow_cluster
    for t in ("orders", "orders-enriched", "orders-dlq"):
        c.create_topic(t, 1)
    orders = [f'{{"id": {i}, "customer": "c{i % 4}"}}'.encode() for i in range(40)]
    await _seed(c.bootstrap_servers, "orders", orders)  # c0 is unknown: 10 dead letters
    proc = await _instance(
        c,
        "examples.enrich:EnrichOrders",
        "e",
        "orders",
        "e-1",
        EOSFLOW_DEAD_LETTER_TOPIC="orders-dlq",
    )
    await _until_committed(c, "e", 40)
    err = await _sigterm(proc)
    assert proc.returncode == 0, err
    assert len(await read_topic(c.bootstrap_servers, "orders-enriched")) == 30
    dlq = await read_topic(c.bootstrap_servers, "orders-dlq")
    assert len(dlq) == 10
    assert all(v is not None and b'"customer": "c0"' in v for _, _, _, v in dlq)
    report = await check_exactly_once(
        c.bootstrap_servers,
        "orders",
        "orders-enriched",
        group_id="e",
        dead_letter_topic="orders-dlq",
    )
    assert report.ok and report.dead_lettered == 10, report.summary()


async def _eosflow(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``python -m eosflow *argv`` with no EOSFLOW_* variables: exit code and stderr."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("EOSFLOW_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eosflow",
        *argv,
        env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


RUN = ["--group-id", "g", "--input-topic", "in", "--transactional-id", "t"]


async def test_unreachable_bootstrap_exits_one_with_one_line() -> None:
    code, err = await _eosflow(
        "run", "examples.passthrough:PassThrough", "--bootstrap-servers", "127.0.0.1:1", *RUN
    )
    lines = [ln for ln in err.splitlines() if ln.startswith("eosflow:")]
    assert code == 1, err
    assert len(lines) == 1 and lines[0].startswith("eosflow: fatal: "), err
    assert "127.0.0.1" in lines[0] and "Traceback" not in err, err


FAILS_ON_START = """
import eosflow

class P(eosflow.Processor):
    async def on_start(self):
        raise LookupError("no table loaded")
"""


async def test_unexpected_error_is_one_line_with_the_traceback_only_at_debug(
    tmp_path: Path,
) -> None:
    (tmp_path / "fails_on_start.py").write_text(FAILS_ON_START)
    argv = ["run", "fails_on_start:P", "--bootstrap-servers", "127.0.0.1:1", *RUN]
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    code, err = await _eosflow(*argv, env=env)
    assert code == 1, err
    assert err == "eosflow: fatal: unexpected LookupError: no table loaded\n"
    code, err = await _eosflow(*argv, "--log-level", "debug", env=env)
    assert code == 1 and "Traceback" in err and "no table loaded" in err, err
    assert err.splitlines()[-1] == "eosflow: fatal: unexpected LookupError: no table loaded"


async def _script(cwd: Path, *argv: str) -> tuple[int, str]:
    """The installed ``eosflow`` script (not ``python -m``, which puts the current folder
    on the path itself), run from ``cwd`` with no PYTHONPATH: exit code and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOSFLOW_")}
    env.pop("PYTHONPATH", None)
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "eosflow"),
        *argv,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_run_finds_the_module_in_the_current_folder_or_app_dir(tmp_path: Path) -> None:
    """``eosflow run mymodule:P`` from the folder of ``mymodule.py``, as the quickstart
    says, and ``--app-dir`` from elsewhere: the module imports (the start then fails on
    the unreachable broker: exit 1), where the script's own folder alone made it exit 2."""
    (tmp_path / "mymodule.py").write_text(FAILS_ON_START)
    argv = ["run", "mymodule:P", "--bootstrap-servers", "127.0.0.1:1", *RUN]
    code, err = await _script(tmp_path, *argv)
    assert (code, err) == (1, "eosflow: fatal: unexpected LookupError: no table loaded\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, err = await _script(elsewhere, *argv)
    assert code == 2 and "cannot import 'mymodule'" in err, err
    code, err = await _script(elsewhere, *argv, "--app-dir", "..")
    assert code == 1 and "no table loaded" in err, err
    code, err = await _script(elsewhere, *argv, "--app-dir", "missing")
    assert (code, err) == (2, "eosflow: --app-dir 'missing' is not a folder\n")


async def test_the_regroup_demo_checks_each_products_minutes() -> None:
    """``eosflow demo --regroup``: orders keyed by customer regrouped by product and
    counted per minute of event time in a second stage, under a SIGKILL: each product's
    minute one final, its count plus its late orders the input's."""
    out = await demo("--regroup", "--records", "10000")
    # 100 s of event time, 31 products: minutes 0 and 1 of each, closed by the closing orders
    assert "regroup: 62 product-minutes from 10000 orders keyed by customer" in out
    assert "the minute's orders: OK" in out
