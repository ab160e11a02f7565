"""Enrichment as a Spark join against a small reference table.

Orders (JSON values: ``{"id": 1, "customer": "c1", "amount": 12.5}``) are joined with a
customer table built once when Spark starts (``prepare``); unknown customers get the tier
``"unknown"`` instead of failing the batch.

    eosflow run examples.spark_enrich:EnrichOrders --group-id enrich --input-topic orders \
        --transactional-id enrich-1
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from eosflow.spark import SparkProcessor

CUSTOMERS = [("c1", "Ada", "gold"), ("c2", "Grace", "silver"), ("c3", "Linus", "bronze")]


class EnrichOrders(SparkProcessor):
    output_topic = "orders-enriched"

    def prepare(self, spark: Any) -> None:
        table = spark.createDataFrame(CUSTOMERS, "customer STRING, name STRING, tier STRING")
        self.customers = F.broadcast(table.cache())

    def transform(self, df: DataFrame) -> DataFrame:
        schema = "id INT, customer STRING, amount DOUBLE"
        orders = df.select("key", F.from_json(F.col("value").cast("string"), schema).alias("o"))
        joined = orders.join(self.customers, F.col("o.customer") == F.col("customer"), "left")
        enriched = F.to_json(
            F.struct(
                F.col("o.id").alias("id"),
                F.col("o.customer").alias("customer"),
                F.col("o.amount").alias("amount"),
                F.col("name"),
                F.coalesce(F.col("tier"), F.lit("unknown")).alias("tier"),
            )
        )
        return joined.select("key", enriched.alias("value"))
