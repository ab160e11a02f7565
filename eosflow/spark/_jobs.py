"""A transaction's Spark job run under a tag, and cancelled from another thread.

Spark cancels groups of jobs by tag, but its two kinds of session keep tags differently,
so the way to cancel is picked once, when the session is known (``tags_for``):

- **Classic PySpark** (``local[*]``, ``spark://``): tags are thread-local properties of
  the SparkContext. The job thread adds its tag with ``sparkContext.addJobTag``; the
  event loop's side cancels with ``sparkContext.cancelJobsWithTag``, which reaches every
  active job carrying the tag whatever thread started it. Cancelling interrupts the
  executor threads (``setInterruptOnCancel``), so a Python UDF stops within Spark's
  ``spark.python.task.killTimeout``. ``SparkSession.addTag`` with ``interruptTag`` does
  not work across threads here: the interrupt found nothing and the job ran to its end,
  and every retry queued behind it (seen on standalone: 20,000 records per transaction
  cascaded to 1,250).
- **Spark Connect** (``sc://``): the client attaches its tags to each operation, and
  ``interruptTag`` asks the server to interrupt this session's operations with the tag,
  from any thread; it answers with the operation ids it interrupted.

``cancel`` returns how many running jobs or operations it reached. Zero means the job had
finished, or never started under the tag, and the caller warns: it cannot cancel what it
cannot see. Whether the job *stopped* is a separate fact, which the caller learns by
waiting for the job thread to return.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger("eosflow.spark")

T = TypeVar("T")


class Tags:
    """Classic PySpark: job tags on the SparkContext (see the module docstring)."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark

    def run(self, tag: str, job: Callable[[], T]) -> T:
        """Run ``job`` in this thread with every Spark job it starts tagged ``tag``."""
        sc = self._spark.sparkContext
        sc.setInterruptOnCancel(True)
        sc.addJobTag(tag)
        try:
            return job()
        finally:
            sc.removeJobTag(tag)

    def cancel(self, tag: str) -> int:
        """Cancel the running jobs tagged ``tag``; how many were running."""
        sc = self._spark.sparkContext
        # py4j: the Scala status tracker knows jobs by tag (PySpark's wrapper does not)
        tracker = sc._jsc.sc().statusTracker()
        active = set(tracker.getActiveJobIds()) & set(tracker.getJobIdsForTag(tag))
        sc.cancelJobsWithTag(tag)
        return len(active)


class ConnectTags(Tags):
    """Spark Connect: operation tags on the client session (see the module docstring)."""

    def run(self, tag: str, job: Callable[[], T]) -> T:
        self._spark.addTag(tag)
        try:
            return job()
        finally:
            self._spark.removeTag(tag)

    def cancel(self, tag: str) -> int:
        return len(self._spark.interruptTag(tag))


def is_connect(spark: Any) -> bool:
    """A Spark Connect session (``sc://``), not a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def tags_for(spark: Any) -> Tags:
    """The tagging and cancelling that work for this kind of session."""
    return ConnectTags(spark) if is_connect(spark) else Tags(spark)
