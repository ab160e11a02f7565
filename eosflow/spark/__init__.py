"""Batch transforms on Spark, inside eosflow's exactly-once transactions.

    from eosflow.spark import SparkProcessor

    class Totals(SparkProcessor):
        output_topic = "totals"

        def transform(self, df):
            return df.groupBy("key").count().selectExpr(
                "key", "cast(count as string) as value")

Each transaction's records become one DataFrame (columns in ``_arrow``), converted
through Arrow without pandas; the job runs off the event loop. Needs the ``spark`` extra:
``pip install 'eosflow[spark]'`` (PySpark 4 with Arrow, and Java 17+).
"""

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "eosflow.spark needs PySpark and pyarrow: pip install 'eosflow[spark]' "
        f"(missing: {exc.name})"
    ) from None

from ._processor import SparkJobError, SparkJobTimeout, SparkProcessor, spark_message
from ._session import SparkSettings

__all__ = ["SparkJobError", "SparkJobTimeout", "SparkProcessor", "SparkSettings", "spark_message"]
