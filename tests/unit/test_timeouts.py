"""``_timeouts.within``: a timed wait whose cancellation is never lost (docs/design.md,
invariant 44). On Python 3.11 ``asyncio.wait_for`` returns instead of raising when the
cancel and the awaited thing's completion land in the same loop step; the membership's
heartbeat loop then never stopped (CI hung 300 s in ``leave()``)."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

import eosflow
from eosflow._timeouts import within


async def _wake_or_interval(wake: asyncio.Event, rounds: list[int]) -> None:
    """The shape of the heartbeat loop: wait for a wake-up or the interval, forever."""
    while True:
        try:
            await within(wake.wait(), 10.0)
        except TimeoutError:
            pass
        wake.clear()
        rounds.append(1)
        await asyncio.sleep(0)


# Mutation caught: ``within`` built on ``asyncio.wait_for`` (Python 3.11) -- the loop goes
# on after its cancel and the task is not cancelled.
async def test_a_cancel_landing_with_the_wake_up_stops_the_loop() -> None:
    wake, rounds = asyncio.Event(), list[int]()
    task = asyncio.create_task(_wake_or_interval(wake, rounds))
    await asyncio.sleep(0)  # the loop waits for its wake-up
    wake.set()  # the wake-up and the cancel in the same loop step
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=2.0)
    assert done, "the cancelled loop went on"
    assert task.cancelled()
    assert rounds == []


async def test_the_wait_times_out_and_cancels_what_it_awaited() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(TimeoutError):
        await within(slow(), 0.05)
    assert started.is_set() and cancelled.is_set()
    assert await within(asyncio.sleep(0, "done"), None) == "done"


def test_no_timed_wait_in_eosflow_uses_asyncio_wait_for() -> None:
    root = pathlib.Path(eosflow.__file__).parent
    users = [
        str(p.relative_to(root))
        for p in sorted(root.rglob("*.py"))
        if p.name != "_timeouts.py" and "asyncio.wait_for(" in p.read_text()
    ]
    assert users == [], f"use _timeouts.within instead of asyncio.wait_for in {users}"
