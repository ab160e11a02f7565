"""Readable logs through an outage: repeated aiokafka lines summarised.

aiokafka retries a lost broker every ``retry_backoff_s`` (10 ms by default here, for
commit latency; its backoff does not grow) and logs every attempt at ERROR: 500 to 750
lines a second per instance during an outage (``python -m benchmarks outage``: 33,715
lines per minute). ``RepeatSummary`` lets the first of a kind of line through, drops
the repeats for ``window_s``, then lets one through carrying how many were dropped:
"Unable connect to node with id 0: ... [repeated 1,403 times in 10 s]". Lines are of a
kind when they differ only in numbers (ports, ids, counts). eosflow's own retries back
off exponentially and summarise themselves (``EosApp``), so only aiokafka's loggers
get the filter, for as long as an app runs.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import time

_NUMBERS = re.compile(r"\d+")


class RepeatSummary(logging.Filter):
    def __init__(self, window_s: float = 10.0, max_kinds: int = 512) -> None:
        super().__init__()
        self.window_s = window_s
        self._max_kinds = max_kinds
        self._kinds: dict[tuple[str, int, str], list[float]] = {}  # [emitted at, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        key = (record.name, record.levelno, _NUMBERS.sub("#", text))
        now = time.monotonic()
        kind = self._kinds.get(key)
        if kind is None:
            if len(self._kinds) >= self._max_kinds:
                self._kinds.clear()  # bounded memory; at worst one extra line per kind
            self._kinds[key] = [now, 0]
            return True
        emitted, dropped = kind
        if now - emitted < self.window_s:
            kind[1] = dropped + 1
            return False
        if dropped:
            record.msg = f"{text} [repeated {int(dropped):,} times in {now - emitted:.0f} s]"
            record.args = ()
        kind[0], kind[1] = now, 0
        return True


def aiokafka_loggers() -> list[logging.Logger]:
    """aiokafka's loggers (they exist once aiokafka is imported; a filter on a logger
    does not apply to its children, so each gets it)."""
    names = [n for n in logging.Logger.manager.loggerDict if n.split(".")[0] == "aiokafka"]
    return [logging.getLogger(n) for n in ["aiokafka", *names]]


class summarised_aiokafka_logs:
    """Install one ``RepeatSummary`` on aiokafka's loggers for the ``with`` block."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.filter = RepeatSummary(window_s)
        self._loggers: list[logging.Logger] = []

    def __enter__(self) -> RepeatSummary:
        self._loggers = aiokafka_loggers()
        for lg in self._loggers:
            lg.addFilter(self.filter)
        return self.filter

    def __exit__(self, *exc: object) -> None:
        for lg in self._loggers:
            lg.removeFilter(self.filter)


class JsonLines(logging.Formatter):
    """``--log-format json``: one JSON object per line -- ``time`` (ISO 8601, UTC),
    ``level``, ``logger``, ``message``, the traceback as ``exception`` when there is one,
    and the progress line's figures as ``progress`` (``_ops._progress``)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        progress = getattr(record, "progress", None)
        if progress is not None:
            entry["progress"] = progress
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str, fmt: str) -> None:
    """The command line's logging: ``fmt`` ``text`` (one plain line each) or ``json``."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])
