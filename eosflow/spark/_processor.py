"""``SparkProcessor``: a transaction's records as one Spark DataFrame job.

The runtime keeps owning transactions, offsets and rebalances: this plugs into
``process_batch``, which the app calls once per transaction with all its records. The
job runs in a worker thread, so heartbeats, the rebalance listener and the commit lock
keep working while Spark computes; a revocation during the job dooms the transaction as
usual.

Failure modes:
- a job that runs past ``job_timeout_s`` (default: 3/4 of the transaction timeout, so the
  commit still fits) is cancelled (``_jobs``: job tags, the way each kind of session
  honours them) and raises ``SparkJobTimeout``, a retriable error: the app aborts,
  rewinds, and retries with half the records (growing back after commits), and the log
  names the limits to raise. The cancel waits a little for the job to stop (up to
  ``CANCEL_GRACE_S``, within the transaction timeout), so the retry does not queue
  behind it; a cancel that reaches no running job, or a job still running after the
  wait, is logged as a warning;
- a failing job (bad transform, executor loss) raises ``SparkJobError`` carrying Spark's
  own message rather than a JVM stack; the app's error policy applies (stop, or
  dead-letter the batch's records).

**State.** A processor declaring ``stores`` or tumbling and hopping ``windows``
overrides ``aggregate(name, df)``: the per-key partial aggregates of the batch for the
store or window ``name`` (``_state``), computed in the same job as ``transform`` (which
is then optional) and merged into the state with ``merge(name, old, partial)`` in the
transaction; windows the batch closed go to ``closed`` as on the per-record path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._config import EosConfig
from .._errors import TransactionError
from .._observe import SparkJobReport
from .._processor import Processor
from .._records import Output, Record
from .._state import seat_of
from .._timeouts import within
from . import _session
from ._arrow import INPUT_DDL, arrow_to_outputs, records_to_arrow
from ._executors import lacking
from ._jobs import Tags, is_connect, tags_for
from ._session import SparkSettings
from ._ship import ship
from ._state import frames, merge_partials
from ._typed import Typed

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
        self._tags: Tags | None = None
        self.last_job_s = 0.0  # wall time of the last Spark job, for measurements
        self.cancelled_jobs = 0  # jobs cancelled past their budget that then stopped
        self._cancel_grace_s = CANCEL_GRACE_S
        self._owner: str | None = None  # the app's transactional id: names a Connect session
        windows = dict(self.windows or {})  # the declared state, fed by aggregate()
        self._windowed = frozenset(windows)
        self._state_names = sorted({*(self.stores or {}), *windows})
        self._typed: Typed | None = None  # typed frames (``_typed``), known at configure

    def transform(self, df: DataFrame) -> DataFrame:
        raise NotImplementedError("override SparkProcessor.transform(df) -> df")

    def aggregate(self, name: str, df: DataFrame) -> DataFrame:
        """The batch's partial aggregates for the store or window ``name``: ``df`` holds
        the batch's records (a window's: one row per record and open window, with its
        ``window_start``); return one row per ``eosflow.spark.STATE_KEYS`` (a window:
        ``WINDOW_KEYS``) with the aggregate as ``value``, e.g.
        ``df.groupBy(*WINDOW_KEYS).agg(F.count("*").alias("value"))``."""
        raise NotImplementedError(
            f"{type(self).__name__} declares {name!r}: override aggregate(name, df) to "
            "give its per-key partial aggregates"
        )

    def merge(self, name: str, old: Any, partial: Any) -> Any:
        """A key's stored value in ``name`` with the batch's ``partial`` merged in
        (``old`` None the first time): their sum by default, for counts and sums.
        Called on the event loop, once per row ``aggregate`` returned."""
        return partial if old is None else old + partial

    @property
    def spark(self) -> Any:
        """The shared SparkSession (after ``on_start``), e.g. for reference tables."""
        if self._spark is None:
            raise RuntimeError("Spark is not started yet: use it from on_start() onwards")
        return self._spark

    @property
    def tags(self) -> Tags:
        """How this session tags and cancels jobs (after ``on_start``)."""
        if self._tags is None:
            raise RuntimeError("Spark is not started yet: use it from on_start() onwards")
        return self._tags

    def configure(self, config: EosConfig) -> None:
        self._owner = config.transactional_id
        # a pipeline's stage may declare a topic by the name of the stage writing it
        seat = seat_of(self)
        aliases = {} if seat is None else seat.aliases
        topics = {aliases.get(t, t): d for t, d in (self.topics or {}).items()}
        typed = Typed(type(self).__name__, topics, config.input_topics, self.output_topic)
        self._typed = typed if typed.model is not None or typed.output is not None else None
        if config.commit_interval_s < 1.0:
            log.warning(
                "commit_interval_s is %.2f s: every transaction pays a Spark job's "
                "fixed cost (~0.2 s here); 1-5 s and larger max_records_per_txn and "
                "max_bytes_per_txn suit the Spark path",
                config.commit_interval_s,
            )
        if self._settings.job_timeout_s is None:
            self._job_timeout_s = config.transaction_timeout_s * 0.75
        # waiting for a cancelled job must not carry the transaction past its timeout
        left_s = config.transaction_timeout_s - self._job_timeout_s
        self._cancel_grace_s = max(0.0, min(CANCEL_GRACE_S, left_s / 2))
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
        group: the ~10 s of a cold start, and the first tasks' class loading on
        executors, must not fall inside a transaction."""
        self._spark = await asyncio.to_thread(_session.acquire, self._settings, self._owner)
        self._tags = tags_for(self._spark)
        if self._settings.ship_code:
            await asyncio.to_thread(ship, self._spark, type(self).__module__)
        await asyncio.to_thread(self._warm_up)
        await asyncio.to_thread(self.prepare, self._spark)

    def _warm_up(self) -> None:
        """An empty batch through Arrow (schema stated: Connect cannot infer one), then a
        tiny job with a Python UDF over as many slices as Spark's default parallelism,
        so every executor has loaded its classes and started a Python worker. Executors
        whose Python lacks a package (PyArrow) stop the start with a ``ConfigError``
        naming it, the interpreter and the settings that pick another (``lacking``)."""
        spark = self.spark
        spark.createDataFrame(records_to_arrow([]), schema=INPUT_DDL).toArrow()
        from pyspark.sql import functions as F
        from pyspark.sql.types import LongType

        slices = _parallelism(spark)
        # a lambda, pickled by value: executors need not have eosflow installed
        echo = F.udf(lambda v: v, LongType())
        try:
            spark.range(0, slices, 1, slices).select(echo("id").alias("id")).collect()
        except Exception as exc:  # the executors' Python lacking pyarrow: one line
            if _is_spark_error(exc) and (error := lacking(spark, exc)) is not None:
                raise error from None
            raise

    def prepare(self, spark: Any) -> None:
        """Called once in a worker thread after Spark started: build reference tables."""

    async def on_stop(self) -> None:
        if self._spark is not None:
            self._spark = None
            await asyncio.to_thread(_session.release)

    async def process_batch(self, records: Sequence[Record]) -> list[Output]:
        if not records:
            return []
        typed = self._typed
        table = (
            typed.to_arrow(records)
            if typed is not None and typed.model is not None
            else records_to_arrow(records)
        )
        seat = seat_of(self)
        state = None if seat is None else seat.batch  # with stores or windows declared
        inputs = frames(table, state, self._state_names) if state is not None else {}
        tag = f"eosflow-{uuid.uuid4().hex[:12]}"
        started = time.monotonic()
        cancelled = False
        tags = self.tags
        job = asyncio.ensure_future(
            asyncio.to_thread(tags.run, tag, lambda: self._job(table, inputs))
        )
        try:
            result = await within(asyncio.shield(job), self._job_timeout_s)
        except TimeoutError:
            cancelled = await self._cancel(tag, job)
            raise SparkJobTimeout(
                f"Spark job on {len(records)} records ran past {self._job_timeout_s:.1f} s; "
                "raise transaction_timeout_s (and session_timeout_s) or "
                "EOSFLOW_SPARK_JOB_TIMEOUT_S, or lower max_records_per_txn"
            ) from None
        except asyncio.CancelledError:  # the app is stopping: the job must not outlive it
            job.add_done_callback(_retrieve)
            with contextlib.suppress(Exception):
                tags.cancel(tag)
            raise
        finally:
            ended = time.monotonic()
            self.last_job_s = ended - started
            self.observer.spark_job(SparkJobReport(started, ended, len(records), cancelled))
        out, partials = result
        if state is not None:
            for name, rows in partials.items():
                merge_partials(state, name, rows, name in self._windowed, self.merge)
        if out is None:
            return []
        if typed is not None and (models := typed.outputs(out, self.output_topic)) is not None:
            return models
        return arrow_to_outputs(out, self.output_topic)

    def _job(self, table: Any, inputs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The outputs (``transform``'s; None when state alone is kept) and each store's
        or window's partials, in one worker thread under one tag (one cancel stops all)."""
        spark = self.spark
        try:
            out = None
            if not inputs or type(self).transform is not SparkProcessor.transform:
                out = self.transform(spark.createDataFrame(table)).toArrow()
            partials = {
                name: self.aggregate(name, spark.createDataFrame(frame)).toArrow()
                for name, frame in inputs.items()
                if frame.num_rows
            }
        except Exception as exc:
            if _is_spark_error(exc):
                raise SparkJobError(spark_message(exc)) from None
            raise
        return out, partials

    async def _cancel(self, tag: str, job: asyncio.Future[Any]) -> bool:
        """Cancel the job that ran past its budget and wait for it to stop, at most
        ``CANCEL_GRACE_S`` and at most half of what the transaction timeout leaves after
        the budget; its outcome is retrieved whenever it comes. True if it stopped
        cancelled within that wait."""
        job.add_done_callback(_retrieve)
        try:
            reached = await asyncio.to_thread(self.tags.cancel, tag)
        except Exception as exc:
            log.warning("cancelling Spark job %s failed: %s", tag, _session.first_line(exc))
            reached = 0
        if reached == 0 and not job.done():
            log.warning(
                "Spark job %s ran past its %.1f s budget, but cancelling it reached no "
                "running job; the retry may queue behind it",
                tag,
                self._job_timeout_s,
            )
        done, _ = await asyncio.wait({job}, timeout=self._cancel_grace_s)
        if done and job.exception() is not None:  # cancelled jobs end in an error
            self.cancelled_jobs += 1
            log.info("Spark job %s cancelled", tag)
            return True
        if done:
            log.warning("Spark job %s ran to its end although it was cancelled", tag)
        else:
            log.warning(
                "Spark job %s still running %.0f s after it was cancelled; the retry "
                "queues behind it",
                tag,
                self._cancel_grace_s,
            )
        return False


CANCEL_GRACE_S = 10.0
"""How long a cancelled job may take to stop before the abort goes on without it. A
Python UDF's worker is killed ``spark.python.task.killTimeout`` (2 s) after its task."""


def _parallelism(spark: Any) -> int:
    """How many slices the warm-up job runs: classic Spark knows its executors' cores;
    a Connect client does not, so ``spark.default.parallelism`` if set, else 2."""
    if is_connect(spark):
        return int(spark.conf.get("spark.default.parallelism", "2"))
    return int(spark.sparkContext.defaultParallelism)


def _retrieve(job: asyncio.Future[Any]) -> None:
    """Read an abandoned job's outcome so asyncio does not report it as never retrieved."""
    if not job.cancelled() and (exc := job.exception()) is not None:
        log.debug("an abandoned Spark job ended with %s", _session.first_line(exc))


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
    # Connect appends "SQLSTATE: 38000" after the Python traceback: not the cause
    lines = [
        ln.strip()
        for ln in text.splitlines()
        if ln.strip() and not ln.strip().startswith("SQLSTATE")
    ]
    # classic puts the traceback on lines of its own; Connect after "[PYTHON_EXCEPTION] ...: "
    if any("Traceback (most recent call last)" in ln for ln in lines):
        for ln in reversed(lines):
            if not ln.startswith(("File ", "at ", "^", "~")) and ":" in ln:
                return ln[:500]
    return (lines[0] if lines else type(exc).__name__)[:500]
