"""The demo's Spark stage: the same enrichment as ``_demo.Enrich``, as a Spark job."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..spark import SparkProcessor


class SparkEnrich(SparkProcessor):
    output_topic = "orders-enriched"

    def transform(self, df: DataFrame) -> DataFrame:
        order = F.from_json(F.col("value").cast("string"), "id INT, customer STRING, amount DOUBLE")
        o = df.select("key", order.alias("o"))
        enriched = F.to_json(
            F.struct(
                F.col("o.id").alias("id"),
                F.col("o.customer").alias("customer"),
                F.col("o.amount").alias("amount"),
                F.when(F.col("o.amount") >= 500, "large").otherwise("small").alias("band"),
                F.round(F.col("o.amount") * 1.2, 2).alias("amount_with_tax"),
            )
        )
        return o.select("key", enriched.alias("value"))
