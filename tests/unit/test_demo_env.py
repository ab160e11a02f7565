"""The demo's instances run where the user points Spark (``scripts/demo --spark``)."""

from eosflow._demo import instance_env


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
