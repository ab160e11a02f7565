"""One Spark session per process, shared by every SparkProcessor and started once.

Local by default (``local[*]``, UI off, driver bound to 127.0.0.1); a master URL for a
Spark cluster, or a Spark Connect endpoint (``sc://host:port``) for a remote one. The
session is reference counted: the last processor to stop it stops it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger("eosflow.spark")


class SparkSettings(BaseSettings):
    """Where Spark runs (``EOSFLOW_SPARK_*`` in the environment)."""

    model_config = SettingsConfigDict(env_prefix="EOSFLOW_SPARK_", frozen=True)

    master: str = Field(default="local[*]", description="local[N], spark://host:port, ...")
    remote: str | None = Field(
        default=None, description="Spark Connect URL, sc://host:port; overrides master"
    )
    app_name: str = "eosflow"
    conf: dict[str, str] = Field(default_factory=dict, description="extra spark.* settings")
    job_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="abort a transaction whose Spark job runs longer; "
        "default: 3/4 of the transaction timeout",
    )


_lock = threading.Lock()
_session: Any = None
_users = 0
_key: SparkSettings | None = None


def acquire(settings: SparkSettings) -> Any:
    """The shared session, started on first use (blocking: call from a worker thread)."""
    global _session, _users, _key
    with _lock:
        if _session is not None:
            if settings != _key:
                raise ValueError(
                    "one Spark session per process: every SparkProcessor must "
                    "use the same SparkSettings"
                )
            _users += 1
            return _session
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName(settings.app_name)
        if settings.remote:
            builder = builder.remote(settings.remote)
        else:
            builder = builder.master(settings.master)
            # Python workers run this interpreter (the app's venv), not whatever python3
            # is first on PATH, so UDFs can import what the app imports. PySpark reads
            # the variable when the context starts; a user's own choice is kept.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            defaults = {
                "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
                "spark.ui.enabled": "false",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.sql.execution.arrow.pyspark.enabled": "true",
            }
            for k, v in {**defaults, **settings.conf}.items():
                builder = builder.config(k, v)
        log.info("starting Spark (%s)", settings.remote or settings.master)
        _session = builder.getOrCreate()
        _users, _key = 1, settings
        return _session


def release() -> None:
    """Drop one user; stop the session when none is left (blocking)."""
    global _session, _users, _key
    with _lock:
        if _session is None:
            return
        _users -= 1
        if _users <= 0:
            log.info("stopping Spark")
            _session.stop()
            _session, _users, _key = None, 0, None
