"""Clicks per user per 5 minutes, counted by Spark a transaction at a time; each
window's count emitted once, when it closes.

The results of ``examples/clicks.py`` (``eosflow.testing.check_windows`` checks either),
but a transaction's clicks are counted in one Spark job: eosflow hands ``aggregate`` one
row per click and open window (``window_start`` added; late clicks left out and
counted), Spark counts them per input partition, user and window, and eosflow adds each
count to the window's stored count in the transaction (``SparkProcessor.merge``: a sum
by default). Windows the transaction's clicks closed are then emitted by ``closed``.
Stream time, grace, late clicks and restores are eosflow's, as on the per-record path.

    EOSFLOW_COMMIT_INTERVAL_S=2 eosflow run examples.spark_clicks:SparkClicks \\
        --group-id clicks --input-topic clicks --transactional-id clicks-1

Its settings are ``examples/clicks.py``'s (``output``, ``window_s``, ``grace_s``: ``--set
name=value`` or ``EOSFLOW_APP_<NAME>``), and so is its window, declared in ``__init__``
before ``SparkProcessor.__init__``, which reads the declared windows.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

import eosflow
from eosflow.spark import WINDOW_KEYS, SparkProcessor
from examples.clicks import Clicks, final


class SparkClicks(SparkProcessor):
    Settings = Clicks.Settings  # output, window_s, grace_s

    def __init__(self, settings: Clicks.Settings | None = None) -> None:
        self.settings = settings or self.Settings()
        self.windows = {"clicks": self.settings.window()}
        super().__init__()  # after the windows: it reads them

    def configure(self, config: eosflow.EosConfig) -> None:
        super().configure(config)
        self.topic = self.settings.output or f"{config.input_topics[0]}-per-window"

    def aggregate(self, name: str, df: DataFrame) -> DataFrame:
        # clicks without a key count for the user b"" (as examples/clicks.py does)
        keyed = df.withColumn("key", F.coalesce("key", F.lit(bytearray())))
        return keyed.groupBy(*WINDOW_KEYS).agg(F.count("*").alias("value"))

    async def closed(self, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
        return final(self.topic, key, window, value)
