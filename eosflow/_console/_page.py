"""``Console``: the page an app serves at ``/`` on its operations port, and the data it
draws.

The page is three static files shipped in the package (``static/``: HTML, CSS and plain
JavaScript -- no framework, no CDN, no build step) and one JSON document,
``/console/snapshot.json``, that the page asks for once a second: the ``Recorder``'s
snapshot and what the app is (``about``: its group, input topics and stages). The routes
plug into the operations server (``_ops._http``), which serves them from its threads;
every answer is built there, from the recorder's lock-guarded state, so an open page
costs the app's event loop nothing but the observer calls it makes anyway.

What the page never shows: a setting. ``about`` holds names only (group, topics,
stages), so no password, token or credential can reach it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from typing import Any

from ._recorder import Recorder

Answer = tuple[int, str, bytes]

_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/console/common.js": ("common.js", "text/javascript; charset=utf-8"),
    "/console/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console/console.css": ("console.css", "text/css; charset=utf-8"),
}
SNAPSHOT = "/console/snapshot.json"


class Console:
    """One app's console: ``recorder`` (an observer to add to the app's) and ``routes``
    for the operations server. ``group`` and ``inputs`` name the app on the page."""

    def __init__(self, group: str, inputs: Iterable[str]) -> None:
        self.recorder = Recorder()
        self._about: dict[str, Any] = {"group": group, "inputs": list(inputs), "stages": []}
        self._files = static_routes(_FILES)

    def name_stages(
        self, readers: Mapping[str, Iterable[str]], regroups: Mapping[str, str] | None = None
    ) -> None:
        """A pipeline's stages, in the graph's order, the topics each reads and, for a
        stage others read, the repartition topic it writes (``regroups``): what the page
        draws the graph from."""
        regroups = regroups or {}
        self._about["stages"] = [
            {"name": n, "reads": list(t), "regroups_to": regroups.get(n)}
            for n, t in readers.items()
        ]

    def routes(self) -> dict[str, Callable[[], Answer]]:
        """Path -> an answer (status, content type, body), built when asked."""
        return {**self._files, SNAPSHOT: self._snapshot}

    def _snapshot(self) -> Answer:
        data = self.recorder.snapshot()
        data["about"] = self._about
        return 200, "application/json", json.dumps(data, allow_nan=False).encode()


def static_routes(files: Mapping[str, tuple[str, str]]) -> dict[str, Callable[[], Answer]]:
    """Path -> the answer of a file of ``static/`` (``files``: path -> (name, type)),
    read once."""
    static = resources.files(__package__) / "static"
    return {
        path: _constant(kind, (static / name).read_bytes()) for path, (name, kind) in files.items()
    }


def _constant(kind: str, body: bytes) -> Callable[[], Answer]:
    return lambda: (200, kind, body)
