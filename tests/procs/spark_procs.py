"""Spark processors used by the Spark tests (importable by `eosflow run` subprocesses)."""

from __future__ import annotations

import os
import time

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from eosflow.spark import SparkProcessor


def _slow(v: str) -> str:
    mark = os.environ.get("SLOW_MARK")
    if mark:  # tells a test that a job is running
        open(mark, "a").close()
    time.sleep(float(os.environ.get("SLOW_UDF_S", "0.5")))
    return v


class Slow(SparkProcessor):
    """Pass-through whose Spark job sleeps per row in a Python UDF, on one partition
    (``SLOW_OUT``: its output topic, default "out")."""

    output_topic = os.environ.get("SLOW_OUT", "out")

    def transform(self, df: DataFrame) -> DataFrame:
        slow = F.udf(_slow, StringType())
        return df.coalesce(1).select("key", slow(F.col("value").cast("string")).alias("value"))


def _boom(v: str) -> str:
    raise ValueError(f"bad value {v!r}")


class Broken(SparkProcessor):
    output_topic = "out"

    def transform(self, df: DataFrame) -> DataFrame:
        return df.select(
            "key", F.udf(_boom, StringType())(F.col("value").cast("string")).alias("value")
        )
