"""``Database``: the sink's one connection to PostgreSQL, made again when it was lost.

Each connection is made with settings that bound how long a write can hold anything:
a statement longer than the transaction timeout is cancelled by asyncpg
(``command_timeout``, a ``TransientError``); a write transaction left idle longer than
that (an instance paused or cut off mid-write) is ended by the server, its locks
released -- as Kafka aborts a transaction past its timeout -- so another instance's
claim never waits on it for long; TCP keepalives notice a peer gone without a word
within ~25 s. Its name in ``pg_stat_activity`` is ``eosflow <transactional_id>``.

A step that fails for a passing reason drops the connection (``step``): the next one is
made afresh, never one that asyncpg left mid-operation or mid-transaction.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import asyncpg

from .._config import EosConfig
from .._errors import FatalError, TransientError
from .._timeouts import within
from ._dsn import Dsn
from ._errors import mapped
from ._retries import Retries

__all__ = ["Database"]

log = logging.getLogger("eosflow.sink")


class Database:
    """The connection to ``dsn`` for a sink run under ``config`` (see the module)."""

    def __init__(self, dsn: Dsn, config: EosConfig, retries: Retries) -> None:
        self.dsn, self.config, self._retries = dsn, config, retries
        self._conn: Any = None

    async def connected(self, step: str, budget_s: float = 0.0) -> Any:
        """A working connection, made again if closed. With ``budget_s`` 0 a failure is
        the caller's to retry (``TransientError``); otherwise it is retried with the
        backoff for ``budget_s``, then ``FatalError``. A refused login is a
        ``ConfigError`` at once."""
        if self._conn is not None and not self._conn.is_closed():
            return self._conn
        await self.close()  # a closed one's resources
        deadline = time.monotonic() + budget_s
        while True:
            try:
                with mapped(step):
                    self._conn = await asyncpg.connect(
                        **self.dsn.connect_args(),
                        timeout=10.0,
                        command_timeout=self.config.transaction_timeout_s,
                        server_settings=self._settings(),
                    )
                return self._conn
            except TransientError as exc:
                if not budget_s:
                    raise
                if self._retries.too_late(deadline):
                    raise FatalError(f"{exc} (for {budget_s:g} s)") from exc
                log.warning("%s; retrying", exc)
                await self._retries.sleep()

    def _settings(self) -> dict[str, str]:
        cfg = self.config
        return {
            "application_name": f"eosflow {cfg.transactional_id}"[:63],
            "idle_in_transaction_session_timeout": str(int(cfg.transaction_timeout_s * 1000)),
            "tcp_keepalives_idle": "10",
            "tcp_keepalives_interval": "5",
            "tcp_keepalives_count": "3",
        }

    @contextlib.contextmanager
    def step(self, step: str) -> Iterator[None]:
        """Run ``step`` on the connection, its errors mapped (``mapped``); a
        ``TransientError`` drops the connection, so the next ``connected`` makes a new
        one. After a FATAL out of turn asyncpg may leave a connection open but stuck
        ("another operation is in progress", then "a manually started transaction")
        until every retry failed. The trade-off: a deadlock or a serialization failure,
        after which the connection is sound, costs a reconnect too (milliseconds, and
        rare)."""
        conn = self._conn
        try:
            with mapped(step):
                yield
        except TransientError:
            if self._conn is conn:  # not one another step made meanwhile
                self.drop()
            raise

    def drop(self) -> None:
        """Abandon the connection at once: its socket closed, the server rolls back
        what it had open."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def close(self) -> None:
        """Close the connection (within 5 s, else dropped); never raises."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await within(conn.close(), 5.0)
            except Exception:
                conn.terminate()

    def redacted(self) -> str:
        """The DSN without its password, for messages."""
        return self.dsn.shown
