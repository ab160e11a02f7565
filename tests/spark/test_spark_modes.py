"""What differs between local Spark, a cluster master and Spark Connect (the mode is
``EOSFLOW_TEST_SPARK``; ``scripts/test`` runs this module in all three)."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from eosflow import ConfigError
from eosflow.spark import SparkSettings, _session, _ship
from eosflow.testing import FakeCluster, spawn_run

MODE = os.environ.get("EOSFLOW_TEST_SPARK", "local")
ROOT = Path(__file__).resolve().parents[2]


def test_loopback_defaults_only_in_local_mode() -> None:
    if MODE == "connect":
        pytest.skip("a Connect session has no driver of its own (run by the connect stage)")
    conf = _session.acquire(SparkSettings()).sparkContext.getConf()
    _session.release()
    forced = ("spark.driver.host", "spark.driver.bindAddress", "spark.pyspark.python")
    got = {k: conf.get(k, None) for k in forced}
    if MODE == "local":
        assert got["spark.driver.bindAddress"] == "127.0.0.1"
        assert got["spark.pyspark.python"] == sys.executable
    else:  # spark://: executors elsewhere must reach the driver and run their own Python
        # (the driver's address is Spark's pick; here SPARK_LOCAL_IP keeps it on loopback)
        assert got["spark.driver.bindAddress"] is None, got
        assert got["spark.pyspark.python"] is None, got


def test_connect_settings_are_applied_or_refused() -> None:
    if MODE != "connect":
        pytest.skip("needs a Spark Connect server (EOSFLOW_TEST_SPARK=connect)")
    remote = SparkSettings().remote
    assert remote
    applied = _session._connect(
        remote, SparkSettings(remote=remote, conf={"spark.sql.shuffle.partitions": "7"}), None
    )
    try:
        assert applied.conf.get("spark.sql.shuffle.partitions") == "7"
    finally:
        applied.stop()
    with pytest.raises(ConfigError) as info:
        _session._connect(
            remote, SparkSettings(remote=remote, conf={"spark.executor.memory": "3g"}), None
        )
    assert "spark.executor.memory=3g cannot be applied over Spark Connect" in str(info.value)
    assert "CANNOT_MODIFY_CONFIG" in str(info.value)


def test_connect_without_its_client_packages_gives_an_install_hint() -> None:
    code = (
        "import sys; sys.modules['grpc'] = None\n"
        "from eosflow.spark import SparkSettings, _session\n"
        "_session.acquire(SparkSettings(remote='sc://127.0.0.1:1'))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.endswith("pip install 'eosflow[spark-connect]' (missing: grpc)"), last


def test_connect_session_ids_are_derived_from_the_transactional_id() -> None:
    ids = _session.session_ids("app-0")
    assert ids == _session.session_ids("app-0") and len(set(ids)) == _session.SESSION_PROBES
    assert not set(ids) & set(_session.session_ids("app-1"))
    assert all(uuid.UUID(i).version == 4 for i in ids)
    assert _session.with_session_id("sc://h:1", "x") == "sc://h:1/;session_id=x"
    assert _session.with_session_id("sc://h:1/;token=t", "x") == "sc://h:1/;token=t;session_id=x"


def test_a_killed_instances_connect_operation_is_interrupted_by_its_successor(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server runs a detached operation on for a minute after its client died; the
    restarted instance (same transactional id) joins that session and interrupts it."""
    if MODE != "connect":
        pytest.skip("needs a Spark Connect server (EOSFLOW_TEST_SPARK=connect)")
    remote = SparkSettings().remote
    assert remote
    owner, marker = f"orphan-{uuid.uuid4().hex[:8]}", tmp_path / "running"
    code = (
        "from eosflow.spark import SparkSettings, _session\n"
        f"spark = _session.acquire(SparkSettings(), {owner!r})\n"
        "def slow(batches):\n"
        "    import pathlib, time\n"
        f"    pathlib.Path({str(marker)!r}).touch()\n"
        "    time.sleep(600)\n"
        "    yield from batches\n"
        "spark.range(1).mapInArrow(slow, 'id long').collect()\n"
    )
    first = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():  # the job's task has started on the server's worker
            assert first.poll() is None, "the first instance ended before its job ran"
            assert time.monotonic() < deadline, "the first instance's job never started"
            time.sleep(0.1)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    with caplog.at_level(logging.WARNING, logger="eosflow.spark"):
        successor = _session._connect(remote, SparkSettings(), owner)
    try:
        assert not successor.release_session_on_close, "a derived session stays open"
        assert successor.session_id == _session.session_ids(owner)[0]
        assert "interrupted 1 operation(s) a previous instance left" in caplog.text
    finally:
        successor.stop()  # without releasing: the session stays open on the server
    again = _session._connect(remote, SparkSettings(), owner)
    try:  # the same session joined again, with nothing left running in it
        assert again.session_id == _session.session_ids(owner)[0]
    finally:
        again.release_session_on_close = True
        again.stop()  # released: the server closes (tombstones) that id
    after = _session._connect(remote, SparkSettings(), owner)
    try:
        assert after.session_id == _session.session_ids(owner)[1], "the next derived id"
    finally:
        after.release_session_on_close = True
        after.stop()


def test_a_shipped_package_runs_on_the_executors_and_its_zip_is_not_left_behind() -> None:
    """On the clusters ``shipped_pkg`` is importable only from the zip sent to them."""
    importlib.import_module("shipped_pkg.calc")  # as a processor's module is, before start
    spark = _session.acquire(SparkSettings())
    try:
        zip_path = _ship.ship(spark, "shipped_pkg.calc")
        assert zip_path.name == "shipped_pkg.zip"

        def doubled(batches):  # type: ignore[no-untyped-def]
            import pyarrow as pa
            import shipped_pkg

            for b in batches:
                yield pa.RecordBatch.from_pydict(
                    {"id": [shipped_pkg.double(int(v)) for v in b["id"].to_pylist()]}
                )

        got = sorted(r.id for r in spark.range(4).mapInArrow(doubled, "id long").collect())
        assert got == [0, 2, 4, 6]
        if MODE == "connect":  # uploaded: nothing left on disk
            assert not zip_path.parent.exists()
        else:  # classic Spark serves the file to executors from its path until it stops
            assert zip_path.parent in _ship._archives
    finally:
        _session.release()  # the shared session's stop removes it (checked by conftest)


def test_the_warm_up_runs_a_python_task_per_slice_of_the_default_parallelism() -> None:
    """So each executor core has loaded its classes and started a Python worker before
    the first transaction's job (a cold executor overran a 6 s budget on standalone)."""
    if MODE == "connect":
        pytest.skip("a Connect client cannot see the server's jobs and executors")
    from eosflow.spark import SparkProcessor

    spark = _session.acquire(SparkSettings())
    try:
        tracker = spark.sparkContext.statusTracker()
        before = set(tracker.getJobIdsForGroup(None))
        p = SparkProcessor()
        p._spark = spark
        p._warm_up()
        jobs = sorted(set(tracker.getJobIdsForGroup(None)) - before)
        assert jobs, "the warm-up ran no Spark job"
        # the tracker hears of tasks through Spark's listener bus, after the job's result
        # (a standalone run read 0 completed tasks at once): read until it tells, 10 s
        deadline = time.monotonic() + 10
        while True:
            stages = [tracker.getStageInfo(s) for s in tracker.getJobInfo(jobs[-1]).stageIds]
            tasks = sum(st.numCompletedTasks for st in stages if st is not None)
            if tasks >= spark.sparkContext.defaultParallelism or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert tasks == spark.sparkContext.defaultParallelism
        if MODE == "local":
            assert tasks >= 2  # local[*] on this 2-core machine: one per core
    finally:
        _session.release()


def _bare_python(home: Path) -> str:
    """An empty virtualenv's interpreter: no pyarrow (nor anything else)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    python = str(home / "bin" / "python")
    no_arrow = subprocess.run([python, "-c", "import pyarrow"], capture_output=True)
    assert no_arrow.returncode != 0  # the executors' Python really lacks it
    return python


@pytest.mark.timeout(600)
async def test_executors_without_pyarrow_stop_the_start_with_one_line(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    """What a new user met first on a cluster whose executors run a Python without
    pyarrow (a bare ``python3`` on the worker's PATH when the app names none; here an
    empty virtualenv's, named by ``PYSPARK_PYTHON`` in the app's environment, where Spark
    reads it): ``eosflow run`` of a Spark processor used to end with ``eosflow: fatal:
    unexpected PythonException: An exception was thrown from the Python worker ...``.
    The warm-up names the cause in one line -- the package, the executors' interpreter,
    the settings that pick another -- and exits 2 (configured wrong, nothing ran).
    Spark's own log lines about the failed tasks come before it."""
    if MODE != "standalone":  # local Spark sets spark.pyspark.python to eosflow's own
        pytest.skip("executors with a Python of their own: the standalone stage runs it")
    python = _bare_python(tmp_path / "bare")
    eosflow_cluster.create_topic("lines", 1)
    proc = await spawn_run(
        "examples.spark_wordcount:WordCount",
        bootstrap_servers=eosflow_cluster.bootstrap_servers,
        group_id="wc",
        input_topics=("lines",),
        transactional_id="wc-1",
        env={
            "PYTHONPATH": str(ROOT),
            # the session's cluster (conftest), as a user's app would name it
            **{k: v for k, v in os.environ.items() if k.startswith("EOSFLOW_SPARK_")},
            "PYSPARK_PYTHON": python,  # the executors' interpreter
        },
        capture=True,
    )
    _out, err = await asyncio.wait_for(proc.communicate(), 300)
    lines = [ln for ln in err.decode().splitlines() if ln.strip()]
    assert proc.returncode == 2, err.decode()[-3000:]
    assert lines[-1].startswith("eosflow: Spark's executors cannot import pyarrow"), lines[-1]
    # the interpreter the executors ran, as they reported it, and the settings
    assert f"their Python is {python} (Python " in lines[-1], lines[-1]
    assert "PYSPARK_PYTHON where eosflow runs" in lines[-1], lines[-1]
    assert "spark.pyspark.python" in lines[-1], lines[-1]
    # before it, Spark's own log (its log4j configuration's, on stderr) shows the failed
    # tasks; nothing of eosflow's says more than the one line
    ours = [ln for ln in lines if ln.startswith("eosflow") or " eosflow" in ln[:40]]
    assert not any("unexpected" in ln or "fatal" in ln for ln in ours), ours
