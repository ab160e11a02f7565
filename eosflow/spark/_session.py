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

The session is reference counted: the last processor to release it stops it.

**Over Connect, a killed instance's operation outlives it.** The server keeps a detached
operation running for ``spark.connect.execute.manager.detachedTimeout`` (60 s by
default), beside the restarted instance's jobs. So the session id is derived from the
app's transactional id, which a restarted instance reuses: on start the instance joins
its predecessor's server-side session and interrupts whatever still runs there. The
trade-offs:

- a clean stop interrupts its operations but leaves the session open (releasing it would
  tombstone the id, and a successor could not join it); the server drops an idle session
  after ``spark.connect.session.manager.defaultSessionTimeout`` (60 min by default);
- a session the server did close (idle expiry, an admin) answers SESSION_CLOSED: the next
  derived id is tried, up to ``SESSION_PROBES``; past those a random id is used, with a
  warning, and that session is released on stop;
- a zombie holding the same transactional id shares the session: the new instance's
  start interrupts the zombie's job (it is fenced anyway); the zombie's stop may interrupt
  the new instance's job, which then aborts and retries;
- a ``session_id`` in the user's ``remote`` URL is used as given, with none of this.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import os
import sys
import threading
import uuid
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .._errors import ConfigError
from ._jobs import is_connect
from ._ship import remove_archives

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


def acquire(settings: SparkSettings, owner: str | None = None) -> Any:
    """The shared session, started on first use (blocking: call from a worker thread).
    ``owner``, the app's transactional id, names the Connect session (see above)."""
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
            _session = _connect(settings.remote, settings, owner)
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


def _connect(remote: str, settings: SparkSettings, owner: str | None) -> Any:
    """A Connect session; its ``stop()`` releases it on the server only when its id is
    not derived from ``owner`` (see above)."""
    for module in CONNECT_NEEDS:
        if _missing(module):
            raise ConfigError(
                "Spark Connect (EOSFLOW_SPARK_REMOTE) needs its client packages: "
                f"pip install 'eosflow[spark-connect]' (missing: {module})"
            )
    log.info("connecting to Spark Connect at %s", remote)
    derived = owner is not None and "session_id=" not in remote
    for sid in session_ids(owner) if owner is not None and derived else ():
        session = _join(with_session_id(remote, sid), settings)
        if session is not None:
            session.release_session_on_close = False  # open for a restarted instance
            return session
    if derived:
        log.warning(
            "Spark Connect: the %d session ids derived from transactional id %r are "
            "closed on the server; using a random one, so a killed instance's "
            "operations there will not be interrupted by its successor",
            SESSION_PROBES,
            owner,
        )
    session = _join(remote, settings)
    if session is None:
        raise ConfigError(f"Spark Connect at {remote}: the session in the URL is closed")
    return session


SESSION_PROBES = 16


def session_ids(owner: str) -> list[str]:
    """The Connect session ids derived from ``owner``, in the order they are tried
    (UUID-4 shaped, as the client requires)."""
    return [
        str(
            uuid.UUID(
                bytes=hashlib.sha256(f"eosflow:{owner}:{n}".encode()).digest()[:16], version=4
            )
        )
        for n in range(SESSION_PROBES)
    ]


def with_session_id(remote: str, sid: str) -> str:
    """``remote`` (``sc://host:port[/;param=value...]``) with ``session_id`` added."""
    if ";" in remote:
        return f"{remote};session_id={sid}"
    return f"{remote.rstrip('/')}/;session_id={sid}"


def _join(url: str, settings: SparkSettings) -> Any:
    """A session on ``url`` with the settings applied and every operation still running
    in it interrupted; None when the server has closed that session id."""
    from pyspark.sql import SparkSession

    session: Any = None
    try:
        session = SparkSession.builder.appName(settings.app_name).remote(url).create()
        orphans = session.interruptAll()
        if orphans:
            log.warning(
                "Spark Connect: interrupted %d operation(s) a previous instance left "
                "running in this session",
                len(orphans),
            )
        for k, v in settings.conf.items():
            try:
                session.conf.set(k, v)
            except Exception as exc:
                raise ConfigError(
                    f"Spark setting {k}={v} cannot be applied over Spark Connect "
                    f"({first_line(exc)}); set it in the Connect server's configuration"
                ) from None
    except Exception as exc:
        if session is not None:
            session.release_session_on_close = False
            session.stop()
        if "SESSION_CLOSED" in str(exc):
            return None
        raise
    except BaseException:
        if session is not None:
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
            remove_archives()
            _session, _users, _key = None, 0, None
