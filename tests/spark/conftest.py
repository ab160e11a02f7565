"""One local Spark session for the whole Spark test module (starting one costs ~8 s)."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from eosflow.spark import SparkSettings, _session


@pytest.fixture(scope="session", autouse=True)
def shared_spark() -> Iterator[None]:
    # Spark's Python workers unpickle the test UDFs: they must import tests/procs too
    procs = str(Path(__file__).parents[1] / "procs")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (procs, os.environ.get("PYTHONPATH")) if p
    )
    _session.acquire(SparkSettings())  # the settings every test processor uses
    yield
    _session.release()
