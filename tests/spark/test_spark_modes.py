"""What differs between local Spark, a cluster master and Spark Connect (the mode is
``EOSFLOW_TEST_SPARK``; ``scripts/test`` runs this module in all three)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from eosflow import ConfigError
from eosflow.spark import SparkSettings, _session

MODE = os.environ.get("EOSFLOW_TEST_SPARK", "local")


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
        remote, SparkSettings(remote=remote, conf={"spark.sql.shuffle.partitions": "7"})
    )
    try:
        assert applied.conf.get("spark.sql.shuffle.partitions") == "7"
    finally:
        applied.stop()
    with pytest.raises(ConfigError) as info:
        _session._connect(
            remote, SparkSettings(remote=remote, conf={"spark.executor.memory": "3g"})
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
