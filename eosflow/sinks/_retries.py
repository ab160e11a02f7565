"""``Retries``: the sink's failure clock and backoff, one per runner.

A failure (``went_wrong``) starts the clock if it is not running and keeps the last
cause; a success (``went_right``) stops it and resets the backoff. ``give_up_if_stuck``
raises ``FatalError`` naming the last cause once failures have outlasted
``retry_timeout_s`` without a success in between -- exhausted retries are an error,
never a silent wait. What counts as a success is the runner's to say (a commit; an
empty poll only when no failed write is owed). ``sleep`` waits the backoff, which
doubles up to ``retry_backoff_max_s``.
"""

from __future__ import annotations

import asyncio
import time

from .._config import EosConfig
from .._errors import EosflowError, FatalError

__all__ = ["Retries"]


class Retries:
    """The failure clock and backoff of ``config`` (see the module)."""

    def __init__(self, config: EosConfig) -> None:
        self.config = config
        self.backoff_s = config.retry_backoff_s
        self._failing: tuple[float, str] | None = None  # since when, and the last cause

    def went_wrong(self, exc: EosflowError) -> None:
        since = self._failing[0] if self._failing is not None else time.monotonic()
        self._failing = (since, str(exc))

    def went_right(self) -> None:
        self._failing, self.backoff_s = None, self.config.retry_backoff_s

    def give_up_if_stuck(self) -> None:
        """``FatalError`` once failures outlasted ``retry_timeout_s`` without a success."""
        if self._failing is None:
            return
        since, cause = self._failing
        if time.monotonic() - since > self.config.retry_timeout_s:
            raise FatalError(
                f"failing for {self.config.retry_timeout_s:g} s (retry_timeout_s): {cause}"
            )

    def too_late(self, deadline: float) -> bool:
        """Whether another backoff would end past ``deadline`` (``time.monotonic``)."""
        return time.monotonic() + self.backoff_s > deadline

    async def sleep(self) -> None:
        await asyncio.sleep(self.backoff_s)
        self.backoff_s = min(self.backoff_s * 2, self.config.retry_backoff_max_s)
