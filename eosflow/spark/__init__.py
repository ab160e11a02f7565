"""Batch transforms on Spark, inside eosflow's exactly-once transactions.

    from eosflow.spark import SparkProcessor

    class Totals(SparkProcessor):
        output_topic = "totals"

        def transform(self, df):
            return df.groupBy("key").count().selectExpr(
                "key", "cast(count as string) as value")

Each transaction's records become one DataFrame (columns in ``_arrow``), converted
through Arrow without pandas; the job runs off the event loop. Needs the ``spark`` extra:
``pip install 'eosflow[spark]'`` (PySpark 4 with Arrow, and Java 17+); ``SparkSettings``
alone imports without it.
"""

from typing import TYPE_CHECKING

from ._session import SparkSettings  # pydantic alone: the settings reference needs no Spark

if TYPE_CHECKING:
    from ._processor import SparkJobError, SparkJobTimeout, SparkProcessor, spark_message
    from ._state import STATE_KEYS, WINDOW_KEYS

__all__ = [
    "STATE_KEYS",
    "WINDOW_KEYS",
    "SparkJobError",
    "SparkJobTimeout",
    "SparkProcessor",
    "SparkSettings",
    "spark_message",
]

_NEED_SPARK = {
    "STATE_KEYS",
    "WINDOW_KEYS",
    "SparkJobError",
    "SparkJobTimeout",
    "SparkProcessor",
    "spark_message",
}


def __getattr__(name: str) -> object:
    """The names that need PySpark and pyarrow, imported on first use: without the extra
    ``from eosflow.spark import SparkProcessor`` stops with one line naming it."""
    if name not in _NEED_SPARK:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "eosflow.spark needs PySpark and pyarrow: pip install 'eosflow[spark]' "
            f"(missing: {exc.name})"
        ) from None
    from . import _processor, _state

    return getattr(_state if name.endswith("_KEYS") else _processor, name)
