"""What the executors' Python lacks, said in one line.

Spark runs Python functions (the warm-up's, a processor's UDFs) in Python workers that
each executor starts with the interpreter the driver names: ``spark.pyspark.python``,
else ``PYSPARK_PYTHON`` in the environment of the app (the driver), else ``python3`` --
found on the executor's PATH. On a cluster that interpreter is the cluster's, and it
may lack a package the job needs: above all PyArrow, which Arrow-optimised Python UDFs
import in the worker (``spark.sql.execution.pythonUDF.arrow.enabled``: on by default in
the pyspark 4.3 eosflow is tested with; the warm-up's UDF follows it, as a processor's
do). Spark reports that as a Python traceback inside a Java stack trace ("unexpected
PythonException: An exception was thrown from the Python worker ..."); ``lacking``
turns it into one ``ConfigError`` line naming the package, the interpreter, and the
settings that choose another.

To name the interpreter it runs one more tiny job with a plain (pickled, not Arrow)
UDF, which needs nothing beyond the pyspark Spark ships to the workers. If that fails
too, the message says the interpreter is unknown; it never hides the first cause.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from .._errors import ConfigError

log = logging.getLogger(__name__)

#: packages of eosflow's spark and spark-connect extras (and theirs) a worker may import
SPARK_EXTRA = frozenset({"pyarrow", "pyspark", "pandas", "numpy"})
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
SETTINGS = "PYSPARK_PYTHON where eosflow runs, or spark.pyspark.python in EOSFLOW_SPARK_CONF"


def missing_module(exc: BaseException) -> str | None:
    """The top-level package a Python worker could not import, if that is what ``exc``
    (a Spark error, its message holding the worker's traceback) reports."""
    found = _MISSING.search(str(exc))
    return found.group(1).split(".")[0] if found else None


def lacking(spark: Any, exc: BaseException) -> ConfigError | None:
    """The one-line error for a Spark job that failed because the executors' Python
    lacks a package; None when ``exc`` is something else."""
    name = missing_module(exc)
    if name is None:
        return None
    what = (
        "a package of eosflow's spark extras" if name in SPARK_EXTRA else "a package the job uses"
    )
    return ConfigError(
        f"Spark's executors cannot import {name} ({what}): their Python is "
        f"{executors_python(spark)}; install {name} there, or point the executors at a "
        f"Python that has it ({SETTINGS})"
    )


def executors_python(spark: Any) -> str:
    """The interpreter an executor's Python worker runs, with its version, as the
    worker sees it (``sys.executable``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    def which(_: int) -> str:  # pickled by value: runs in the worker
        import platform
        import sys

        return f"{sys.executable} (Python {platform.python_version()})"

    try:
        udf = F.udf(which, StringType(), useArrow=False)
        row = spark.range(0, 1, 1, 1).select(udf("id").alias("python")).collect()[0]
        return str(row["python"])
    except Exception as exc:  # the first cause stays the message's subject
        log.debug("asking the executors for their Python failed: %r", exc)
        return "unknown (asking the executors failed too)"
