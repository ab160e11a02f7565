"""Spark processors used by the Spark tests (importable by `eosflow run` subprocesses)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from pydantic import BaseModel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

import eosflow
from eosflow.spark import SparkProcessor
from examples.spark_clicks import SparkClicks


def _slow_udf(delay_s: float, mark: str | None, rows: str | None) -> Callable[[str], str]:
    """The UDF, with its settings read on the driver (``SLOW_UDF_S``, ``SLOW_MARK``: a
    file touched when a job runs, ``SLOW_ROWS``: a file with a line per row done)."""

    def slow(v: str) -> str:
        if mark:
            open(mark, "a").close()
        time.sleep(delay_s)
        if rows:
            with open(rows, "a") as f:
                f.write(v + "\n")
        return v

    return slow


class Slow(SparkProcessor):
    """Pass-through whose Spark job sleeps per row in a Python UDF, on one partition
    (``SLOW_OUT``: its output topic, default "out")."""

    output_topic = os.environ.get("SLOW_OUT", "out")

    def transform(self, df: DataFrame) -> DataFrame:
        env = os.environ
        udf = _slow_udf(
            float(env.get("SLOW_UDF_S", "0.5")), env.get("SLOW_MARK"), env.get("SLOW_ROWS")
        )
        slow = F.udf(udf, StringType())
        return df.coalesce(1).select("key", slow(F.col("value").cast("string")).alias("value"))


def _boom(v: str) -> str:
    raise ValueError(f"bad value {v!r}")


class Broken(SparkProcessor):
    output_topic = "out"

    def transform(self, df: DataFrame) -> DataFrame:
        return df.select(
            "key", F.udf(_boom, StringType())(F.col("value").cast("string")).alias("value")
        )


class TenSecondClicks(SparkClicks):
    """``examples/spark_clicks.py`` with 10 s windows and a 2 s grace (``SLOW_MARK``: a
    file touched when an aggregate job is planned, so a test can kill it mid-job)."""

    def __init__(self) -> None:
        super().__init__(SparkClicks.Settings(window_s=10, grace_s=2))

    def aggregate(self, name: str, df: DataFrame) -> DataFrame:
        mark = os.environ.get("SLOW_MARK")
        if mark:
            open(mark, "a").close()
            time.sleep(float(os.environ.get("SLOW_AGGREGATE_S", "0")))
        return super().aggregate(name, df)


class Order(BaseModel):
    id: int
    customer: str
    amount: int


class Total(BaseModel):
    customer: str
    orders: int
    amount: int


class TypedTotals(SparkProcessor):
    """Typed frames: ``in`` holds ``Order`` models (JSON) keyed by ``str``, so the frame
    has ``id``, ``customer`` and ``amount`` columns; each transaction's totals per
    customer go to ``totals`` as ``Total`` rows (its fields as columns, no ``value``)."""

    output_topic = "totals"
    topics = {
        "in": eosflow.Topic(key=str, value=Order),
        "totals": eosflow.Topic(key=str, value=Total),
    }

    def transform(self, df: DataFrame) -> DataFrame:
        return (
            df.where(F.col("id").isNotNull())  # a tombstone's row: every field null
            .groupBy("customer")
            .agg(F.count("*").alias("orders"), F.sum("amount").alias("amount"))
            .select(F.col("customer").alias("key"), "customer", "orders", "amount")
        )
