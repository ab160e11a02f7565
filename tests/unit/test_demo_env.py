"""The demo's instances run where the user points Spark (``scripts/demo --spark``)."""

import asyncio
import json
from pathlib import Path

import pytest

from eosflow._demo import cluster_settings, instance_env, relay


def test_spark_settings_reach_the_demos_instances() -> None:
    environ = {
        "EOSFLOW_SPARK_REMOTE": "sc://spark.example:15002",
        "EOSFLOW_SPARK_CONF": '{"spark.sql.shuffle.partitions": "4"}',
        "EOSFLOW_GROUP_ID": "not-the-demos",  # the demo's own settings are its own
        "HOME": "/home/u",
    }
    env = instance_env(True, environ)
    assert env["EOSFLOW_SPARK_REMOTE"] == "sc://spark.example:15002"
    assert env["EOSFLOW_SPARK_CONF"] == environ["EOSFLOW_SPARK_CONF"]
    assert "EOSFLOW_GROUP_ID" not in env and "HOME" not in env
    assert env["EOSFLOW_TRANSACTION_TIMEOUT_S"] == "8"  # one Spark job per transaction


def test_the_python_demo_ignores_spark_settings() -> None:
    env = instance_env(False, {"EOSFLOW_SPARK_MASTER": "spark://h:7077"})
    assert not any(k.startswith("EOSFLOW_SPARK_") for k in env)


def test_the_demo_cluster_moves_a_crashed_instances_partitions_as_soon_under_both_protocols() -> (
    None
):
    # under the consumer protocol the session is the broker's: at Kafka's 45 s the demo
    # stalled that long after its SIGKILL (51.7 s instead of 4.5 s to commit everything)
    for spark in (False, True):
        env, groups = instance_env(spark, {}), cluster_settings(spark).groups
        assert groups.consumer_session_timeout_s == float(env["EOSFLOW_SESSION_TIMEOUT_S"])
        assert groups.consumer_heartbeat_interval_s == float(env["EOSFLOW_HEARTBEAT_INTERVAL_S"])


async def test_the_demo_shows_eosflows_lines_and_keeps_the_rest_in_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An instance's output through the demo's relay: eosflow's log lines and anything
    that is not a log line are shown; aiokafka's lines (a rebalance's "Heartbeat failed"
    warnings, which a new user took for trouble) only reach the instance's log file."""
    lines = [
        {"level": "WARNING", "logger": "aiokafka.consumer.group_coordinator",
         "message": "Heartbeat failed for group demo-enrich because it is rebalancing"},
        {"level": "WARNING", "logger": "eosflow.session", "message": "transaction aborted"},
    ]  # fmt: skip
    stream = asyncio.StreamReader()
    for entry in lines:
        stream.feed_data((json.dumps(entry) + "\n").encode())
    stream.feed_data(b"Traceback (most recent call last):\n")
    # Spark's JVM writes plain text: its log lines and progress bars go to the file only
    stream.feed_data(b"25/12/02 10:00:01 WARN NativeCodeLoader: Unable to load native\n")
    stream.feed_data(b"[Stage 3:>                                                  (0 + 2) / 2]\n")
    stream.feed_data(b'Setting default log level to "WARN".\n')
    stream.feed_data(b"x" * (2**16 + 10) + b"\n")  # over the limit: skipped, not the end
    stream.feed_eof()
    log = tmp_path / "instance-0.log"
    with log.open("w") as file:
        await relay(stream, 0, file)
    shown = capsys.readouterr().out.splitlines()
    assert shown == [
        "  [instance 0] WARNING transaction aborted",
        "  [instance 0] Traceback (most recent call last):",
        "  [instance 0] [a line over 64 KiB, dropped]",
    ]
    kept = log.read_text().splitlines()
    assert len(kept) == 7 and "Heartbeat failed" in kept[0]
