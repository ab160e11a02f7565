"""One Spark session for the whole Spark test module (starting one costs ~8 s), in the
mode ``EOSFLOW_TEST_SPARK`` names:

- ``local`` (the default): local Spark in this process;
- ``standalone``: a standalone master and worker started here
  (``testbed._spark_clusters``);
- ``connect``: a Spark Connect server started here.

On both clusters the processors' code reaches the Python workers only by being shipped
(``EOSFLOW_SPARK_SHIP_CODE``): the clusters do not get this process's PYTHONPATH.

The mode reaches every ``SparkProcessor`` the way it reaches a user's: through
``EOSFLOW_SPARK_MASTER`` / ``EOSFLOW_SPARK_REMOTE`` (and ``EOSFLOW_SPARK_SHIP_CODE``).
"""

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from eosflow.spark import SparkSettings, _session, _ship
from testbed._spark_clusters import connect_server, standalone

MODES = ("local", "standalone", "connect")
MODE = os.environ.get("EOSFLOW_TEST_SPARK", "local")
if MODE not in MODES:
    raise pytest.UsageError(f"EOSFLOW_TEST_SPARK={MODE!r}: one of {', '.join(MODES)}")


@pytest.fixture(scope="session", autouse=True)
def shared_spark() -> Iterator[None]:
    # Spark's Python workers unpickle the test UDFs: they must import tests/procs too
    procs = str(Path(__file__).parents[1] / "procs")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (procs, os.environ.get("PYTHONPATH")) if p
    )
    with tempfile.TemporaryDirectory(prefix="eosflow-spark-") as home:
        if MODE == "standalone":
            with standalone(Path(home)) as url:
                # Spark's own settings, as a user's cluster would have them (eosflow sets
                # nothing for spark://): executors run the test's interpreter
                env = {
                    "EOSFLOW_SPARK_MASTER": url,
                    "EOSFLOW_SPARK_SHIP_CODE": "true",
                    "PYSPARK_PYTHON": sys.executable,
                    "SPARK_LOCAL_IP": "127.0.0.1",  # the driver listens on loopback only
                    # one core of the worker's two per application: the SIGKILL test's
                    # instances run beside this process's session (by default the first
                    # application takes every core and the next one waits for ever)
                    "EOSFLOW_SPARK_CONF": json.dumps(
                        {"spark.cores.max": "1", "spark.executor.memory": "768m"}
                    ),
                }
                yield from _session_on(env)
        elif MODE == "connect":
            with connect_server(Path(home)) as url:
                env = {"EOSFLOW_SPARK_REMOTE": url, "EOSFLOW_SPARK_SHIP_CODE": "true"}
                yield from _session_on(env)
        else:
            yield from _session_on({})


def _session_on(env: dict[str, str]) -> Iterator[None]:
    os.environ.update(env)  # the processors' SparkSettings() and spawned apps read these
    shipped = Path(tempfile.gettempdir()).glob(f"{_ship.TEMP_PREFIX}*")
    before = set(shipped)
    try:
        _session.acquire(SparkSettings())  # the settings every test processor uses
        yield
        _session.release()
        left = set(Path(tempfile.gettempdir()).glob(f"{_ship.TEMP_PREFIX}*")) - before
        assert not left, f"shipped zips left behind after the session stopped: {left}"
    finally:
        for k in env:
            os.environ.pop(k, None)
