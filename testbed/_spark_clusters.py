"""Spark clusters for the Spark tests and benchmarks, from what the pyspark package ships
(the test kit's; imports pyspark, so only with the ``spark`` extra).

- ``standalone``: a master and one worker (``bin/spark-class``), the worker's executors
  running this interpreter (``PYSPARK_PYTHON``) as a cluster's own configuration would say;
- ``connect``: a Spark Connect server (``bin/spark-submit`` of ``SparkConnectServer``,
  from ``jars/spark-connect_*.jar``) over local Spark.

Everything binds to 127.0.0.1 (``SPARK_LOCAL_IP``) on free ports; logs go to the given
folder; each JVM is stopped by its pid (SIGTERM, then SIGKILL) through the genuine
brokers' process helpers, which also kill it if the test run dies. Ready means the
process said so in its log (the master elected, the worker registered, the Connect
server started) and, for Connect, that its port answers.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark

from eosflow.testing._genuine_procs import free_ports, spawn, tail, terminate

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT_S = 120.0


def _env(home: Path) -> dict[str, str]:
    """Ours, without PYTHONPATH: code reaches the cluster's Python workers only as it
    would a user's, shipped by ``EOSFLOW_SPARK_SHIP_CODE``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return dict(
        env,
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(home),
        PYSPARK_PYTHON=sys.executable,
    )


def _await_line(log: Path, line: str, proc: subprocess.Popen[bytes], what: str) -> None:
    """Until ``line`` is in ``log``; the process ending or the timeout is an error with
    the log's tail."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if log.exists() and line in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited before it was ready:\n{tail(log, 40)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready in {START_TIMEOUT_S:.0f} s:\n{tail(log, 40)}")
        time.sleep(0.2)  # polling a log for readiness


@contextlib.contextmanager
def standalone(home: Path, cores: int = 2, memory: str = "3g") -> Iterator[str]:
    """A standalone master with one worker; yields the master URL."""
    port, ui, worker_port, worker_ui = free_ports(4)
    env, cls = _env(home), str(SPARK_HOME / "bin" / "spark-class")
    master = spawn(
        [cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(ui)],
        home / "master.log", home, env,
    )  # fmt: skip
    worker = None
    try:
        _await_line(home / "master.log", "I have been elected leader", master, "Spark master")
        url = f"spark://127.0.0.1:{port}"
        (home / "work").mkdir(exist_ok=True)
        worker = spawn(
            [cls, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
             "--port", str(worker_port), "--webui-port", str(worker_ui), "--cores", str(cores),
             "--memory", memory, "--work-dir", str(home / "work")],
            home / "worker.log", home, env,
        )  # fmt: skip
        _await_line(
            home / "worker.log", "Successfully registered with master", worker, "Spark worker"
        )
        yield url
    finally:
        if worker is not None:
            terminate(worker, grace_s=10.0)
        terminate(master, grace_s=10.0)


@contextlib.contextmanager
def connect_server(home: Path, cores: int = 2, memory: str = "1g") -> Iterator[str]:
    """A Spark Connect server over ``local[cores]`` with ``memory`` of driver heap;
    yields its ``sc://`` URL."""
    (port,) = free_ports(1)
    submit = str(SPARK_HOME / "bin" / "spark-submit")
    server = spawn(
        [submit, "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--name", "eosflow-test-connect", "--master", f"local[{cores}]",
         "--driver-memory", memory,
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", f"spark.connect.grpc.binding.port={port}",
         "--conf", "spark.ui.enabled=false",
         "--conf", "spark.driver.host=127.0.0.1",
         "--conf", "spark.driver.bindAddress=127.0.0.1",
         "spark-internal"],
        home / "connect.log", home, _env(home),
    )  # fmt: skip
    try:
        _await_line(home / "connect.log", "Spark Connect server started", server, "Connect")
        yield f"sc://127.0.0.1:{port}"
    finally:
        terminate(server, grace_s=10.0)
