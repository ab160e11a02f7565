"""Spark processors used by the Spark tests (importable by `eosflow run` subprocesses)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

import eosflow
from eosflow.spark import SparkProcessor


class Enrich(SparkProcessor):
    """JSON orders -> order with a price band and amount with tax (Spark SQL)."""

    output_topic = "out"

    def transform(self, df: DataFrame) -> DataFrame:
        order = F.from_json(F.col("value").cast("string"), "id INT, amount DOUBLE")
        o = df.select("key", order.alias("o"))
        enriched = F.to_json(
            F.struct(
                F.col("o.id").alias("id"),
                F.when(F.col("o.amount") >= 500, "large").otherwise("small").alias("band"),
                F.round(F.col("o.amount") * 1.2, 2).alias("amount_with_tax"),
            )
        )
        return o.select("key", enriched.alias("value"))


def enrich_in_python(records: Sequence[eosflow.Record]) -> list[tuple[bytes | None, dict]]:
    out = []
    for r in records:
        o = json.loads(r.value or b"{}")
        out.append(
            (
                r.key,
                {
                    "id": o["id"],
                    "band": "large" if o["amount"] >= 500 else "small",
                    "amount_with_tax": round(o["amount"] * 1.2, 2),
                },
            )
        )
    return out


def _slow(v: str) -> str:
    time.sleep(float(os.environ.get("SLOW_UDF_S", "0.5")))
    return v


class Slow(SparkProcessor):
    """Pass-through whose Spark job sleeps per row in a Python UDF, on one partition."""

    output_topic = "out"

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
