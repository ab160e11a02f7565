"""The engine's per-record loop in Python: what ``_drive`` compiles, step for step.

``drive`` runs records through ``process`` for as long as each one's coroutine finishes
without suspending and gives an ``Output`` of bytes (or None, or nothing that needs the
engine): the common case of every app, with no ``await`` of the engine's own. It hands
the loop back (``Engine._process``) at everything else, saying why and where. Where
``enter`` is given (a stateful app's stores, ``Stores.entering``), it is called with the
partition before the first record of each run of one partition's records in a call:
nothing else runs between two records of one call (a coroutine that suspends ends it).
What it returns takes that run's records in place of ``process`` (None: ``process``):
a join's table rows go to the table's copy that way, with no wrapper around the others.

- ``END``: every record is done; ``STOP``: the deadline passed or ``ending`` is done
  (asked from the second record on, ``records[i]`` not started);
- ``YIELD``: time to let the event loop run (``yield_at`` passed; ``records[i]`` not
  started);
- ``RESULT``: ``records[i]``'s result (routed) needs the engine's checks: an ``Output``
  of objects, a list, something wrong;
- ``AWAIT``: ``records[i]``'s awaitable suspended -- (coroutine, what it yielded), to be
  finished by ``resumed`` -- or is not a coroutine -- (awaitable, ``UNSTARTED``), to be
  awaited;
- ``RAISED``: ``records[i]`` raised (its call, its coroutine or ``route``): the
  exception, for the engine's error policy.

Each record before ``i`` is done: its outputs are in ``outputs``. ``mark_runs`` then
gives each run of one partition's records its next offset, in one pass at the end.
"""

from __future__ import annotations

import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from .._records import Output, Record

__all__ = [
    "AWAIT",
    "END",
    "RAISED",
    "RESULT",
    "STOP",
    "UNSTARTED",
    "YIELD",
    "drive",
    "mark_runs",
    "resumed",
]

END, STOP, YIELD, RESULT, AWAIT, RAISED = range(6)
UNSTARTED: Any = object()  # an awaitable ``drive`` did not start (not a coroutine)


def drive(
    records: list[Record],
    start: int,
    process: Callable[[Record], Awaitable[object]],
    route: Callable[[object], object] | None,
    enter: Callable[[tuple[str, int]], Callable[[Record], Awaitable[object]] | None] | None,
    outputs: list[Output],
    deadline: float,
    ending: Any,
    yield_at: float,
) -> tuple[int, int, Any]:
    """Records from ``start`` through ``process`` into ``outputs`` (the module's doc):
    (the index reached, why it stopped there, what goes with it)."""
    i, n = start, len(records)
    topic, part = None, None  # the run entered last in this call (``enter``)
    run = process  # what that run's records go through (``enter``'s answer, else process)
    while i < n:
        if i:
            now = time.monotonic()
            if now >= deadline or (ending is not None and ending.done()):
                return i, STOP, None
            if now >= yield_at:
                return i, YIELD, None
        try:
            r = records[i]
            if enter is not None and (r.partition != part or r.topic != topic):
                topic, part = r.topic, r.partition
                run = enter((topic, part)) or process
            aw = run(r)
            if type(aw) is not types.CoroutineType:
                return i, AWAIT, (aw, UNSTARTED)
            try:
                yielded = aw.send(None)
            except StopIteration as stop:
                result = stop.value
            else:
                return i, AWAIT, (aw, yielded)
            if route is not None and type(result) is not Output and result is not None:
                result = route(result)
        except BaseException as exc:  # the engine's policy: dead letter, stop, or re-raise
            return i, RAISED, exc
        if result is not None:
            if type(result) is not Output:
                return i, RESULT, result
            value, key = result.value, result.key
            if not (value is None or type(value) is bytes):
                return i, RESULT, result
            if not (key is None or type(key) is bytes):
                return i, RESULT, result
            outputs.append(result)
        i += 1
    return i, END, None


def mark_runs(records: list[Record], done: int, offsets: dict[tuple[str, int], int]) -> None:
    """For each run of one partition's records among ``records[:done]``, the offset after
    its last one, in ``offsets`` (a later run of a partition overwrites an earlier)."""
    topic, part, last = "", -1, -1
    for i in range(done):
        r = records[i]
        if r.partition != part or r.topic != topic:
            if last >= 0:
                offsets[(topic, part)] = last + 1
            topic, part = r.topic, r.partition
        last = r.offset
    if last >= 0:
        offsets[(topic, part)] = last + 1


@types.coroutine
def resumed(coro: Coroutine[Any, Any, Any], yielded: Any) -> Generator[Any, Any, Any]:
    """The rest of ``coro``, which ``drive`` started and which yielded ``yielded`` to the
    event loop: awaiting this is awaiting ``coro`` from there on (PEP 380's ``yield
    from``: what the loop sends or throws goes to ``coro``, its return is the result)."""
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as stop:
                return stop.value
