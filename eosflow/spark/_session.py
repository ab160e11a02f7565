"""One Spark session per process, shared by every SparkProcessor and started once.

Where it runs, chosen by ``SparkSettings``:

- **local** (``local[*]``, the default): the driver binds to 127.0.0.1, the UI is off,
  and Python workers run this interpreter (``PYSPARK_PYTHON``, unless the user set it),
  so UDFs import what the app imports;
- **a cluster master** (``spark://``, ``yarn``, ``k8s://``): none of those loopback
  defaults -- executors on other hosts must reach the driver at an address Spark picks
  (or ``spark.driver.host``), with their own Python (``spark.pyspark.python`` or the
  cluster's ``PYSPARK_PYTHON``); user code reaches them through ``spark.submit.pyFiles``
  or ``SparkProcessor.ship``;
- **Spark Connect** (``remote``, ``sc://host:port``): the server owns Spark's
  configuration; each ``conf`` entry is set on the session after it connects, and one the
  server refuses (a static setting) stops the start with a ``ConfigError`` naming it,
  rather than being dropped silently (PySpark's builder ignores such failures).

The session is reference counted: the last processor to release it stops it; over
Connect, stopping releases the server-side session and whatever it still runs.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import threading
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .._errors import ConfigError
from ._jobs import is_connect

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
    ship_code: bool = Field(
        default=False,
        description="send the processor's module (or its top-level package) to the "
        "executors at start: needed on a cluster when UDFs live in your own code",
    )
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
        if settings.remote:
            _session = _connect(settings.remote, settings)
        else:
            _session = _classic(settings)
        _users, _key = 1, settings
        return _session


LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}
CONNECT_NEEDS = ("pandas", "grpc", "grpc_status", "google.rpc", "zstandard")
"""What ``pyspark.sql.connect`` imports beyond pyspark (``pyspark[connect]``)."""


def _classic(settings: SparkSettings) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(settings.app_name).master(settings.master)
    defaults = {"spark.sql.execution.arrow.pyspark.enabled": "true"}
    if settings.master.startswith("local"):
        # PySpark reads the variable when the context starts; a user's own choice is kept
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        defaults |= LOCAL_DEFAULTS | {"spark.pyspark.python": os.environ["PYSPARK_PYTHON"]}
    for k, v in {**defaults, **settings.conf}.items():
        builder = builder.config(k, v)
    log.info("starting Spark (%s)", settings.master)
    return builder.getOrCreate()


def _connect(remote: str, settings: SparkSettings) -> Any:
    for module in CONNECT_NEEDS:
        if _missing(module):
            raise ConfigError(
                "Spark Connect (EOSFLOW_SPARK_REMOTE) needs its client packages: "
                f"pip install 'eosflow[spark-connect]' (missing: {module})"
            )
    from pyspark.sql import SparkSession

    log.info("connecting to Spark Connect at %s", remote)
    session = SparkSession.builder.appName(settings.app_name).remote(remote).create()
    try:
        for k, v in settings.conf.items():
            try:
                session.conf.set(k, v)
            except Exception as exc:
                raise ConfigError(
                    f"Spark setting {k}={v} cannot be applied over Spark Connect "
                    f"({first_line(exc)}); set it in the Connect server's configuration"
                ) from None
    except BaseException:
        session.stop()
        raise
    return session


def _missing(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return True
    return False


def first_line(exc: BaseException) -> str:
    """An exception's first non-empty line, at most 300 characters."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def release() -> None:
    """Drop one user; stop the session when none is left (blocking)."""
    global _session, _users, _key
    with _lock:
        if _session is None:
            return
        _users -= 1
        if _users <= 0:
            log.info("stopping Spark")
            if is_connect(_session):
                with contextlib.suppress(Exception):  # best effort: the server may be gone
                    _session.interruptAll()
            _session.stop()
            _session, _users, _key = None, 0, None
