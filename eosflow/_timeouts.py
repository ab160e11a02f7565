"""``within``: ``asyncio.wait_for`` without Python 3.11's lost cancellation.

On Python 3.11, ``asyncio.wait_for`` swallows a ``cancel()`` that arrives in the same
loop step as the awaited thing's completion: it returns the result, and the task that was
told to stop goes on (CPython gh-86296, fixed in 3.12 by building ``wait_for`` on
``asyncio.timeout``). A loop that waits "for a wake-up or the interval" and is stopped by
cancellation then never stops: the membership's heartbeat loop did exactly that when a
wake-up met ``leave()`` (the app's stop hung; CI's test timed out at 300 s).

``within`` awaits in the calling task under ``asyncio.timeout``, whose cancellation is
exact on 3.11. Every timed wait in ``eosflow`` goes through it (a test scans the package
for ``asyncio.wait_for``). Failure mode: ``TimeoutError`` when ``timeout_s`` passes, and
the awaited coroutine is cancelled (a shielded future goes on).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], timeout_s: float | None) -> T:
    """``await aw``, raising ``TimeoutError`` after ``timeout_s`` seconds (None: never)."""
    async with asyncio.timeout(timeout_s):
        return await aw


def outlived(fut: asyncio.Future[object]) -> None:
    """A done-callback for a shielded future that may outlive its wait: its error is
    retrieved (accounted for by whoever gave up waiting), not reported as never
    retrieved."""
    if not fut.cancelled():
        fut.exception()


def step_timeout_s(transaction_timeout_s: float) -> float:
    """The time budget of one step of a commit (offsets, heartbeat): a quarter of the
    transaction timeout, so the whole commit stays within it."""
    return transaction_timeout_s / 4
