"""Orders regrouped by product record by record, then counted per product and minute of
event time on Spark a transaction at a time: a Spark stage after the regroup.

    EOSFLOW_COMMIT_INTERVAL_S=2 eosflow run examples.spark_regroup:SparkMinutes \\
        --group-id minutes --input-topic orders --transactional-id minutes-1

Stage ``by-product`` (``examples/regroup.py``'s) regroups each order of the setting
``orders`` (default ``orders``; value: JSON with ``order`` and ``product``) under its
product, keeping the order's time. Stage ``count`` is a ``SparkProcessor``: it declares
the regrouped orders as ``Regrouped`` models under the stage's name, so its frame has
``order`` and ``product`` columns, and it counts them per product and one-minute window
in one Spark job per transaction. Each window's final, ``[window start in ms, orders]``
keyed by the product, goes to ``output`` (default ``<orders>-per-minute``) once the
window closes. With a batch stage the whole pipeline runs a transaction at a time: give
it a commit interval of seconds.
"""

from __future__ import annotations

import json

from pydantic import BaseModel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import eosflow
from eosflow.spark import WINDOW_KEYS, SparkProcessor
from examples.regroup import ByProduct


class Regrouped(BaseModel):
    """An order as stage ``by-product`` regroups it (key: its product)."""

    order: int
    product: str


class SparkPerMinute(SparkProcessor):
    """The regrouped orders counted per product and minute on Spark; each minute's final
    once it closes."""

    windows = {"minutes": eosflow.Tumbling(size_s=60, grace_s=0)}
    topics = {"by-product": eosflow.Topic(key=str, value=Regrouped)}

    def __init__(self, output: str) -> None:
        super().__init__()  # after the windows: it reads them
        self.output = output
        self.columns: list[str] = []  # the last frame's, as aggregate saw them

    def aggregate(self, name: str, df: DataFrame) -> DataFrame:
        self.columns = df.columns
        return df.groupBy(*WINDOW_KEYS).agg(F.count("*").alias("value"))

    async def closed(self, key: bytes, window: eosflow.Window, value: int) -> eosflow.Output:
        return eosflow.Output(self.output, json.dumps([window.start_ms, value]), key=key)


class SparkMinutes(eosflow.Pipeline):
    class Settings(eosflow.AppSettings):
        orders: str = "orders"  # the input topic
        output: str | None = None  # the output topic (None: <orders>-per-minute)

    def __init__(self, settings: Settings | None = None) -> None:
        s = settings or self.Settings()
        self.stages = {
            "by-product": eosflow.Stage(ByProduct(), inputs=(s.orders,)),
            "count": eosflow.Stage(
                SparkPerMinute(s.output or f"{s.orders}-per-minute"), inputs=("by-product",)
            ),
        }
