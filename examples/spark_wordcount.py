"""Word counts per transaction, computed by Spark.

Each transaction's records become one DataFrame; the processor emits one record per word
with that transaction's count (key = word, value = count as text). Because each count is
committed exactly once with the offsets it covers, a downstream reader that sums the
counts per word gets exact totals, however often instances crash or rebalance.

    eosflow run examples.spark_wordcount:WordCount --group-id wc --input-topic lines \
        --transactional-id wc-1      # with EOSFLOW_COMMIT_INTERVAL_S=2 for larger batches
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from eosflow.spark import SparkProcessor


class WordCount(SparkProcessor):
    output_topic = "word-counts"

    def transform(self, df: DataFrame) -> DataFrame:
        words = df.select(
            F.explode(F.split(F.lower(F.col("value").cast("string")), r"\W+")).alias("word")
        ).where(F.col("word") != "")
        return (
            words.groupBy("word")
            .count()
            .select(F.col("word").alias("key"), F.col("count").cast("string").alias("value"))
        )
