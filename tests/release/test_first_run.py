"""What a new user meets first, tried as they met it.

A Spark standalone cluster started from pyspark's jars on the same host, its executors
running a Python without pyarrow (a bare ``python3`` on the worker's PATH, when the app
names none; here an empty virtualenv's, named by ``PYSPARK_PYTHON`` in the app's
environment, which is where Spark reads it): ``eosflow run`` of a Spark processor used to end with
``eosflow: fatal: unexpected PythonException: An exception was thrown from the Python
worker: Traceback ...``. The warm-up now names the cause in one line: the package, the
executors' interpreter, and the settings that pick another (exit 2: the environment is
configured wrong, nothing ran). Spark's own log lines about the failed tasks come
before it, as Spark's log configuration says. Starting Spark takes ~20 s.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from eosflow.testing import FakeCluster, spawn_run

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(600)


def _bare_python(home: Path) -> str:
    """An empty virtualenv's interpreter: no pyarrow (nor anything else)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    python = str(home / "bin" / "python")
    no_arrow = subprocess.run([python, "-c", "import pyarrow"], capture_output=True)
    assert no_arrow.returncode != 0  # the executors' Python really lacks it
    return python


async def test_executors_without_pyarrow_stop_the_start_with_one_line(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    from testbed._spark_clusters import standalone

    python = _bare_python(tmp_path / "bare")
    eosflow_cluster.create_topic("lines", 1)
    (tmp_path / "spark").mkdir()
    with standalone(tmp_path / "spark", cores=1, memory="1g") as master:
        proc = await spawn_run(
            "examples.spark_wordcount:WordCount",
            bootstrap_servers=eosflow_cluster.bootstrap_servers,
            group_id="wc",
            input_topics=("lines",),
            transactional_id="wc-1",
            env={
                "PYTHONPATH": str(ROOT),
                "EOSFLOW_SPARK_MASTER": master,
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
