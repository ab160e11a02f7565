"""The demo's instances run where the user points Spark (``scripts/demo --spark``)."""

from eosflow._demo import cluster_settings, instance_env


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
