"""``GroupPage``: the console's page of a whole group -- what ``eosflow status`` reads
from the broker (members, who holds which partition, committed offsets against the last
stable offsets, lag per partition and in all), served by ``eosflow console`` and
refreshed live.

The page asks for ``/console/group.json`` every 2 s; the answer is the last look at the
broker while it ended less than ``REFRESH_S`` ago, else a new one. One look is in flight
at a time: a request that comes meanwhile gets the last answer at once (or, before the
first, waits for that look), so however many pages are open the broker is asked at most
once every ``REFRESH_S`` after the last look ended, and a slow broker never queues
requests behind a lock (each look is a DescribeGroups, an OffsetFetch and a ListOffsets
per topic, and may read a few batches: up to ``LOOK_TIMEOUT_S``). The total lag of each
look is kept (the last ``HISTORY``) for the page's chart; a look that fails keeps a gap.

A look that fails -- the group unknown, a broker away -- is an answer too: the error's
one line beside the last history, and the next request looks again. The looking itself
(``fetch``) is given by the caller, ``_ops``, which owns the broker's side: this room
only shows what it is handed, as plain JSON types, and never a setting.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ._page import Answer, static_routes
from ._recorder import TEXT_MAX

REFRESH_S = 2.0
"""The youngest look at the broker that is answered again rather than taken anew."""
HISTORY = 300
"""Looks whose total lag the chart draws."""
LOOK_TIMEOUT_S = 30.0
"""How long a look may take before its answer is the timeout (``group_status`` may read
for 10 s and close its consumer in 10 more)."""

Fetch = Callable[[], Awaitable[Mapping[str, Any]]]
_FILES = {
    "/": ("group.html", "text/html; charset=utf-8"),
    "/console/common.js": ("common.js", "text/javascript; charset=utf-8"),
    "/console/group.js": ("group.js", "text/javascript; charset=utf-8"),
    "/console/console.css": ("console.css", "text/css; charset=utf-8"),
}


class GroupPage:
    """``fetch`` looks at the group (awaited on ``loop``; its mapping holds ``group``,
    ``state``, ``protocol``, ``members``, ``lag`` and ``partitions``); ``routes`` for a
    server that answers from its own threads. ``clock`` is the wall clock the page
    shows, ``monotonic`` the one a look's age is taken on."""

    def __init__(
        self,
        group: str,
        fetch: Fetch,
        loop: asyncio.AbstractEventLoop,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._group, self._fetch, self._loop, self._clock = group, fetch, loop, clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._last: tuple[float, bytes] | None = None  # (monotonic end of the look, body)
        self._looked = threading.Event()  # set while no look is in flight
        self._looked.set()
        self._history: deque[dict[str, float | None]] = deque(maxlen=HISTORY)
        self._files = static_routes(_FILES)

    def routes(self) -> dict[str, Callable[[], Answer]]:
        return {**self._files, "/console/group.json": self._answer}

    def _answer(self) -> Answer:
        with self._lock:
            last = self._last
            if last is not None and self._monotonic() - last[0] < REFRESH_S:
                return 200, "application/json", last[1]
            mine = self._looked.is_set()  # no look in flight: this request makes one
            if mine:
                self._looked.clear()
        if not mine:
            if last is None:  # nothing to answer yet: the first look's answer
                self._looked.wait(LOOK_TIMEOUT_S + 1.0)
                last = self._last
            body = last[1] if last is not None else b'{"error": "looking"}'
            return 200, "application/json", body
        try:
            body = json.dumps(self._look(self._clock()), allow_nan=False).encode()
            with self._lock:
                self._last = (self._monotonic(), body)
        finally:
            self._looked.set()
        return 200, "application/json", body

    def _look(self, now: float) -> dict[str, Any]:
        try:
            future = asyncio.run_coroutine_threadsafe(_awaited(self._fetch), self._loop)
        except RuntimeError:  # the loop closed: the command is stopping
            return {"group": self._group, "now": now, "error": "stopping", "history": []}
        try:
            status = dict(future.result(LOOK_TIMEOUT_S))
        except Exception as exc:  # the page says it, and the next request looks again
            future.cancel()
            why = str(exc) or type(exc).__name__
            if len(why) > TEXT_MAX:
                why = why[: TEXT_MAX - 1] + "\u2026"
            self._history.append({"t": now, "lag": None})
            return {"group": self._group, "now": now, "error": why, "history": [*self._history]}
        self._history.append({"t": now, "lag": float(status["lag"])})
        return {**status, "now": now, "error": None, "history": [*self._history]}


async def _awaited(fetch: Fetch) -> Mapping[str, Any]:
    return await fetch()
