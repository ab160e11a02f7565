"""``Failures``: the backoff and the give-up rule of an app's failed transactions;
``dead_letter``: a failed record's copy for the dead-letter topic."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from .._config import EosConfig
from .._errors import DecodeError, FatalError
from .._records import Output, Record
from .._timeouts import within

log = logging.getLogger("eosflow.app")


class Failures:
    """Consecutive failed transactions (aborted, recovered, or a step that could not
    reach the broker) since the last commit: each waits a backoff that doubles from
    ``retry_backoff_s`` to ``retry_backoff_max_s``, and once failures have gone on for
    ``retry_timeout_s`` the app stops with a ``FatalError`` carrying the last cause.
    Warnings are summarised: one when failures start, then at most one per 10 s. A
    failure long after the previous one (more than ``retry_timeout_s``) starts afresh."""

    _REPORT_EVERY_S = 10.0

    def __init__(self, config: EosConfig) -> None:
        self._config = config
        self._since: float | None = None
        self._last = 0.0
        self._count = 0
        self._reported = 0.0
        self._backoff = config.retry_backoff_s

    def reset(self) -> None:
        if self._since is not None and self._count > 1:
            log.info(
                "committing again after %d failed attempts over %.1f s",
                self._count,
                time.monotonic() - self._since,
            )
        self._since = None
        self._count = 0
        self._backoff = self._config.retry_backoff_s

    async def failed(self, reason: str, exc: BaseException | None, stopping: asyncio.Event) -> None:
        cfg = self._config
        now = time.monotonic()
        if self._since is None or now - self._last > cfg.retry_timeout_s:
            self.reset()
            self._since = self._reported = now
            log.warning("transaction failed: %s; retrying", reason)
        elif now - self._since > cfg.retry_timeout_s:
            raise FatalError(
                f"no transaction committed for {now - self._since:.0f} s "
                f"({self._count + 1} failed attempts); last: {reason}"
            ) from exc
        elif now - self._reported >= self._REPORT_EVERY_S:
            self._reported = now
            log.warning(
                "still failing after %.0f s (%d attempts); last: %s",
                now - self._since,
                self._count + 1,
                reason,
            )
        self._count += 1
        self._last = now
        with contextlib.suppress(TimeoutError):  # a stop cuts the wait short
            await within(stopping.wait(), self._backoff)
        self._backoff = min(self._backoff * 2, cfg.retry_backoff_max_s)


def dead_letter(record: Record, exc: BaseException, topic: str) -> Output:
    """The dead-letter copy of ``record`` (as read: a record that did not decode goes as
    it was written): same key and value, original headers plus the error, the record's
    coordinates and, for a ``DecodeError``, the field."""
    headers = (
        *record.headers,
        ("eosflow.error", f"{type(exc).__name__}: {exc}".encode()),
        ("eosflow.source", f"{record.topic}/{record.partition}/{record.offset}".encode()),
    )
    if isinstance(exc, DecodeError):  # where it did not decode: key, value, a field's path
        headers = (*headers, ("eosflow.error.field", exc.field.encode()))
    return Output(topic=topic, value=record.value, key=record.key, headers=headers)
