"""``SparkProcessor``: a transaction's records as one Spark DataFrame job.

The runtime keeps owning transactions, offsets and rebalances: this plugs into
``process_batch``, which the app calls once per transaction with all its records. The
job runs in a worker thread, so heartbeats, the rebalance listener and the commit lock
keep working while Spark computes; a revocation during the job dooms the transaction as
usual.

Failure modes:
- a job that runs past ``job_timeout_s`` (default: 3/4 of the transaction timeout, so the
  commit still fits) is interrupted and raises ``SparkJobTimeout``, a retriable error:
  the app aborts, rewinds, and retries with half the records, and the log names the limits
  to raise;
- a failing job (bad transform, executor loss) raises ``SparkJobError`` carrying Spark's
  own message rather than a JVM stack; the app's error policy applies (stop, or
  dead-letter the batch's records).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._config import EosConfig
from .._errors import TransactionError
from .._processor import Processor
from .._records import Output, Record
from . import _session
from ._arrow import arrow_to_outputs, records_to_arrow
from ._session import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("eosflow.spark")


class SparkJobError(Exception):
    """A Spark job failed; the message is Spark's, without the JVM stack."""


class SparkJobTimeout(TransactionError):
    """A Spark job would have outlived the transaction; it was interrupted."""


class SparkProcessor(Processor):
    """Override ``transform(df) -> df``. ``output_topic`` is where rows without a
    ``topic`` column go; ``spark`` says where Spark runs (default: local, shared)."""

    output_topic: str | None = None
    spark_settings: SparkSettings | None = None

    def __init__(self) -> None:
        self._settings = self.spark_settings or SparkSettings()
        self._spark: Any = None
        self._job_timeout_s = self._settings.job_timeout_s or 30.0
        self.last_job_s = 0.0  # wall time of the last Spark job, for measurements

    def transform(self, df: DataFrame) -> DataFrame:
        raise NotImplementedError("override SparkProcessor.transform(df) -> df")

    @property
    def spark(self) -> Any:
        """The shared SparkSession (after ``on_start``), e.g. for reference tables."""
        if self._spark is None:
            raise RuntimeError("Spark is not started yet: use it from on_start() onwards")
        return self._spark

    def configure(self, config: EosConfig) -> None:
        if config.commit_interval_s < 1.0:
            log.warning(
                "commit_interval_s is %.2f s: every transaction pays a Spark job's "
                "fixed cost (~0.2 s here); 1-5 s and a larger max_records_per_txn "
                "suit the Spark path",
                config.commit_interval_s,
            )
        if self._settings.job_timeout_s is None:
            self._job_timeout_s = config.transaction_timeout_s * 0.75
        budget = config.transaction_timeout_s - config.commit_interval_s
        if self._job_timeout_s >= budget:
            log.warning(
                "Spark job timeout %.1f s leaves no time to commit within the "
                "%.1f s transaction timeout",
                self._job_timeout_s,
                config.transaction_timeout_s,
            )

    async def on_start(self) -> None:
        """Start (or join) the Spark session and warm it up, before the app joins its
        group: the ~10 s of a cold start must not fall inside a transaction."""
        self._spark = await asyncio.to_thread(_session.acquire, self._settings)
        await asyncio.to_thread(self._warm_up)
        await asyncio.to_thread(self.prepare, self._spark)

    def _warm_up(self) -> None:
        self.spark.createDataFrame(records_to_arrow([])).toArrow()

    def prepare(self, spark: Any) -> None:
        """Called once in a worker thread after Spark started: build reference tables."""

    async def on_stop(self) -> None:
        if self._spark is not None:
            self._spark = None
            await asyncio.to_thread(_session.release)

    async def process_batch(self, records: Sequence[Record]) -> list[Output]:
        if not records:
            return []
        table = records_to_arrow(records)
        tag = f"eosflow-{uuid.uuid4().hex[:12]}"
        loop = asyncio.get_running_loop()
        started = loop.time()
        job = asyncio.ensure_future(asyncio.to_thread(self._run_job, table, tag))
        try:
            result = await asyncio.wait_for(asyncio.shield(job), self._job_timeout_s)
        except TimeoutError:
            await asyncio.to_thread(self._interrupt, tag)
            raise SparkJobTimeout(
                f"Spark job on {len(records)} records ran past {self._job_timeout_s:.1f} s; "
                "raise transaction_timeout_s (and session_timeout_s) or "
                "EOSFLOW_SPARK_JOB_TIMEOUT_S, or lower max_records_per_txn"
            ) from None
        finally:
            self.last_job_s = loop.time() - started
        return arrow_to_outputs(result, self.output_topic)

    def _run_job(self, table: Any, tag: str) -> Any:
        spark = self.spark
        spark.addTag(tag)
        try:
            return self.transform(spark.createDataFrame(table)).toArrow()
        except Exception as exc:
            if _is_spark_error(exc):
                raise SparkJobError(spark_message(exc)) from None
            raise
        finally:
            spark.removeTag(tag)

    def _interrupt(self, tag: str) -> None:
        try:
            self.spark.interruptTag(tag)
        except Exception as exc:  # the job may have ended meanwhile
            log.debug("interrupting %s: %r", tag, exc)


def _is_spark_error(exc: BaseException) -> bool:
    from pyspark.errors import PySparkException

    if isinstance(exc, PySparkException):
        return True
    return type(exc).__name__ == "Py4JJavaError"


def spark_message(exc: BaseException) -> str:
    """Spark's own message: the part before the JVM stack trace; for a Python error
    raised inside a UDF, its last line (``ValueError: ...``)."""
    text = str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            text = str(java.getMessage())
        except Exception:
            pass
    text = text.split("JVM stacktrace:")[0].strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if any(ln.startswith("Traceback") for ln in lines):
        for ln in reversed(lines):
            if not ln.startswith(("File ", "at ", "^", "~")) and ":" in ln:
                return ln[:500]
    return (lines[0] if lines else type(exc).__name__)[:500]
