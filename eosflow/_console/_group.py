"""``GroupPage``: the console's page of a whole group -- what ``eosflow status`` reads
from the broker (members, who holds which partition, committed offsets against the last
stable offsets, lag per partition and in all), served by ``eosflow console`` and
refreshed live.

The page asks for ``/console/group.json`` every 2 s; the answer is the last look at the
broker while it is younger than ``REFRESH_S``, else a new one. One lock makes the looks
one at a time, so however many pages are open the broker is asked at most once every
``REFRESH_S`` (each look is a DescribeGroups, an OffsetFetch and a ListOffsets per
topic). The total lag of each look is kept (the last ``HISTORY``) for the page's chart.

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
from importlib import resources
from typing import Any

from ._page import Answer, constant
from ._recorder import TEXT_MAX

REFRESH_S = 2.0
"""The youngest look at the broker that is answered again rather than taken anew."""
HISTORY = 300
"""Looks whose total lag the chart draws."""
LOOK_TIMEOUT_S = 12.0
"""How long a look may take before its answer is the timeout."""

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
    server that answers from its own threads."""

    def __init__(
        self,
        group: str,
        fetch: Fetch,
        loop: asyncio.AbstractEventLoop,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._group, self._fetch, self._loop, self._clock = group, fetch, loop, clock
        self._lock = threading.Lock()
        self._last: tuple[float, bytes] | None = None
        self._history: deque[dict[str, float]] = deque(maxlen=HISTORY)
        static = resources.files(__package__) / "static"
        self._files = {
            path: (kind, (static / name).read_bytes()) for path, (name, kind) in _FILES.items()
        }

    def routes(self) -> dict[str, Callable[[], Answer]]:
        routes = {path: constant(kind, body) for path, (kind, body) in self._files.items()}
        routes["/console/group.json"] = self._answer
        return routes

    def _answer(self) -> Answer:
        with self._lock:
            now = self._clock()
            if self._last is None or now - self._last[0] >= REFRESH_S:
                self._last = (now, json.dumps(self._look(now), allow_nan=False).encode())
            return 200, "application/json", self._last[1]

    def _look(self, now: float) -> dict[str, Any]:
        future = asyncio.run_coroutine_threadsafe(_awaited(self._fetch), self._loop)
        try:
            status = dict(future.result(LOOK_TIMEOUT_S))
        except Exception as exc:  # the page says it, and the next request looks again
            future.cancel()
            why = str(exc) or type(exc).__name__
            if len(why) > TEXT_MAX:
                why = why[: TEXT_MAX - 1] + "\u2026"
            return {"group": self._group, "now": now, "error": why, "history": [*self._history]}
        self._history.append({"t": now, "lag": float(status["lag"])})
        return {**status, "now": now, "error": None, "history": [*self._history]}


async def _awaited(fetch: Fetch) -> Mapping[str, Any]:
    return await fetch()
