"""One stateful benchmark contender in its own process.

    python -m benchmarks._state_contenders NAME BOOTSTRAP SRC DST RECORDS INTERVAL GROUP STATE_DIR

NAME:
- ``eosflow-copy``: eosflow's pass-through (the stateless reference), default settings;
- ``eosflow-copy-bare`` / ``eosflow-copy-ops``: the same copy with every operations
  feature off (no metrics port, no progress line, no tracing), then with all of them on:
  the metrics port scraped every second by a thread as a Prometheus would (harsher than
  its usual 15 s) and the console's snapshot asked as often (its page open), the
  progress line every 10 s, tracing through OpenTelemetry's API
  (``python -m benchmarks metrics`` runs the two in turns);
- ``eosflow-count``: the running count of ``examples/counting.py`` (a JSON store per
  partition, the new count emitted per record), default settings;
- ``quixstreams-count``: the same count in quixstreams 3 (exactly-once, its RocksDB state
  keyed by the message key, ``apply(stateful=True)``);
- ``eosflow-window``: a count per key in 60 s tumbling windows of event time (the
  records' timestamps), each window's final emitted once when it closes
  (``examples/clicks.py``'s processor, ``WINDOW``; its ``process`` restated with the
  clock's hook inline), default settings;
- ``quixstreams-window``: the same in quixstreams,
  ``tumbling_window(60_000).count().final()``, exactly-once (the same in Kafka Streams,
  ``kafka-streams-window``, is a JVM of its own: ``java/WindowCount.java``, which
  ``state_bench`` starts with ``WINDOW``'s size and grace);
- ``eosflow-restore``: a fresh eosflow count instance joining the group after the input is
  all consumed: it only restores every partition's store from the changelog; RECORDS is
  then the changelog records expected, and the time is from start to every store ready.

Prints one JSON line: records, seconds (first record processed to the last commit; for
the restore, start to ready), peak RSS (MiB) and the RSS once a tenth was processed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._contenders import EXTRA, peak_rss_mb

EVENT_EVERY_MS = 1  # the input's event times: a record a millisecond, from the seed's minute


def _window() -> Any:
    import eosflow

    return eosflow.Tumbling(size_s=60, grace_s=5)


WINDOW = _window()


def _plus_one(n: int) -> int:
    return n + 1


def _config(
    boot: str, src: str, group: str, state_dir: str, interval: float, ops: Any = None
) -> Any:
    import eosflow

    extra = {} if ops is None else {"ops": ops}
    return eosflow.EosConfig(
        bootstrap_servers=boot,
        group_id=group,
        input_topics=(src,),
        transactional_id=group,
        commit_interval_s=interval,
        state_dir=state_dir,
        **extra,
    )


BARE = {"metrics_port": None, "progress_interval_s": 0, "tracing": False}
ALL_ON = {"metrics_port": 0, "progress_interval_s": 10, "tracing": True, "console": True}


def _scrape_every_second(app: Any, stop: threading.Event) -> None:
    """A Prometheus that scrapes every second, and the console's page open: its snapshot
    asked once a second, as the page does (checks every answer is whole)."""
    port = app.ops.port
    while not stop.wait(1.0):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert b"eosflow_records_consumed_total" in r.read()
        EXTRA["scrapes"] = EXTRA.get("scrapes", 0) + 1
        url = f"http://127.0.0.1:{port}/console/snapshot.json"
        with urllib.request.urlopen(url, timeout=5) as r:
            assert b'"series"' in r.read()
        EXTRA["snapshots"] = EXTRA.get("snapshots", 0) + 1


async def run_eosflow(
    boot: str,
    src: str,
    dst: str,
    n: int,
    interval: float,
    group: str,
    state_dir: str,
    count: bool,
    ops: Any = None,
    window: bool = False,
) -> float:
    import eosflow
    from examples.clicks import Clicks

    first: list[float] = []

    class Copy(eosflow.Processor):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if not first:
                first.append(time.monotonic())
                EXTRA["cpu0"] = time.process_time()
            return eosflow.Output(dst, record.value, key=record.key)

    class Count(eosflow.Processor):
        stores = {"counts": eosflow.JSON}

        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if not first:
                first.append(time.monotonic())
                EXTRA["cpu0"] = time.process_time()
            counts = self.state("counts")
            key = record.key or b""
            c = counts.get(key, 0) + 1
            counts.put(key, c)
            return eosflow.Output(dst, str(c).encode(), key=key)

    class Windowed(Clicks):
        def __init__(self) -> None:
            super().__init__()
            self.windows = {"clicks": WINDOW}  # over the one Clicks builds from its settings

        def configure(self, config: eosflow.EosConfig) -> None:
            self.topic = dst

        async def process(self, record: eosflow.Record) -> None:
            # Clicks.process with the clock's hook inline, as the copy's and the count's:
            # awaiting super().process cost a coroutine a record no user's processor has
            if not first:
                first.append(time.monotonic())
                EXTRA["cpu0"] = time.process_time()
            self.window("clicks").update(record.key or b"", _plus_one, 0)

        async def closed(self, key: bytes, window: eosflow.Window, value: int) -> eosflow.Output:
            # the final as WindowCount.java formats it, byte for byte (Clicks.closed's
            # json.dumps of a dict cost 6% of the run: work the Java contender skips)
            start, end = window.start_ms, window.end_ms
            body = b'{"start": %d, "end": %d, "value": %d}' % (start, end, value)
            return eosflow.Output(dst, body, key=key)

    processor = Windowed() if window else Count() if count else Copy()
    app = eosflow.EosApp(processor, _config(boot, src, group, state_dir, interval, ops))
    stop = threading.Event()
    async with app:
        if app.ops.port is not None:
            threading.Thread(target=_scrape_every_second, args=(app, stop), daemon=True).start()
        while not (app.stats.records >= n and not app.in_transaction):
            if app.failure is not None:
                raise app.failure
            if "rss_tenth_mb" not in EXTRA and app.stats.records >= n // 10:
                EXTRA["rss_tenth_mb"] = peak_rss_mb("VmRSS")
            await asyncio.sleep(0.005)
        done = time.monotonic()
        EXTRA["cpu_s"] = time.process_time() - EXTRA.pop("cpu0")  # the process's, all threads
        stop.set()
    return done - first[0]


async def run_restore(boot: str, src: str, group: str, state_dir: str, interval: float) -> float:
    """Start a fresh count instance (its own transactional id and empty local copy) and
    time it until every assigned partition's stores are restored."""
    import eosflow

    ready: set[str] = set()
    restored: list[int] = []

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if msg.startswith("stores of ") and msg.endswith(" ready"):
                ready.add(msg)
            elif msg.startswith("restored the stores of "):
                restored.append(int(msg.split(": ")[1].split()[0]))

    for name in ("eosflow.session", "eosflow.state"):
        logging.getLogger(name).addHandler(Watch())
        logging.getLogger(name).setLevel(logging.INFO)

    class Count(eosflow.Processor):
        stores = {"counts": eosflow.JSON}

        async def process(self, record: eosflow.Record) -> None:
            raise AssertionError("the input is all consumed: nothing to process")

    cfg = _config(boot, src, group, state_dir, interval).model_copy(
        update={"transactional_id": f"{group}-restore"}
    )
    started = time.monotonic()
    app = eosflow.EosApp(Count(), cfg)
    async with app:
        while not (app.assigned and len(ready) >= len(app.assigned)):
            if app.failure is not None:
                raise app.failure
            await asyncio.sleep(0.005)
        took = time.monotonic() - started
    EXTRA["restored_records"] = sum(restored)
    return took


def _quixstreams(
    boot: str, n: int, interval: float, group: str, state_dir: str
) -> tuple[Any, Callable[[], None], list[float]]:
    """A quixstreams application as both contenders run it (exactly-once, the same commit
    interval), a tick to call per record (the first record's time, the RSS at a tenth,
    a graceful stop at the last: its final checkpoint commits the last transaction), and
    the first record's time once ticked."""
    app = quix_app(boot, group, interval, state_dir)
    seen = [0]
    first: list[float] = []

    def tick() -> None:
        if not first:
            first.append(time.monotonic())
        seen[0] += 1
        if seen[0] == n // 10:
            EXTRA["rss_tenth_mb"] = peak_rss_mb("VmRSS")
        if seen[0] >= n:
            app.stop()

    return app, tick, first


def quix_app(boot: str, group: str, interval: float, state_dir: str) -> Any:
    """A quixstreams ``Application`` as the state and join benchmarks run it:
    exactly-once, from the earliest offsets, ``interval`` between commits, its state
    under ``state_dir``."""
    from quixstreams import Application

    return Application(
        broker_address=boot,
        consumer_group=group,
        processing_guarantee="exactly-once",
        auto_offset_reset="earliest",
        commit_interval=interval,
        state_dir=state_dir,
        loglevel="WARNING",
    )


def run_quixstreams(
    boot: str, src: str, dst: str, n: int, interval: float, group: str, state_dir: str
) -> float:
    app, tick, first = _quixstreams(boot, n, interval, group, state_dir)
    t_in = app.topic(src, value_deserializer="bytes", key_deserializer="bytes")
    t_out = app.topic(dst, value_serializer="bytes", key_serializer="bytes")

    def count(value: Any, state: Any) -> bytes:
        c = state.get("count", 0) + 1
        state.set("count", c)
        tick()
        return str(c).encode()

    app.dataframe(t_in).apply(count, stateful=True).to_topic(t_out)
    app.run()
    return time.monotonic() - first[0]


def run_quixstreams_window(
    boot: str, src: str, dst: str, n: int, interval: float, group: str, state_dir: str
) -> float:
    app, tick, first = _quixstreams(boot, n, interval, group, state_dir)
    t_in = app.topic(src, value_deserializer="bytes", key_deserializer="bytes")
    t_out = app.topic(dst, value_serializer="json", key_serializer="bytes")

    def counted(value: Any) -> Any:
        tick()
        return value

    sdf = app.dataframe(t_in).update(counted)
    sdf = sdf.tumbling_window(WINDOW.size_ms, grace_ms=WINDOW.grace_ms).count().final()
    sdf.to_topic(t_out)
    app.run()
    return time.monotonic() - first[0]


def main() -> None:
    name, boot, src, dst = sys.argv[1:5]
    n, interval, group, state_dir = int(sys.argv[5]), float(sys.argv[6]), sys.argv[7], sys.argv[8]
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    if name == "quixstreams-count":
        seconds = run_quixstreams(boot, src, dst, n, interval, group, state_dir)
    elif name == "quixstreams-window":
        seconds = run_quixstreams_window(boot, src, dst, n, interval, group, state_dir)
    elif name == "eosflow-window":
        seconds = asyncio.run(
            run_eosflow(boot, src, dst, n, interval, group, state_dir, False, window=True)
        )
    elif name in ("eosflow-copy", "eosflow-count", "eosflow-copy-bare", "eosflow-copy-ops"):
        count = name == "eosflow-count"
        ops = {"eosflow-copy-bare": BARE, "eosflow-copy-ops": ALL_ON}.get(name)
        seconds = asyncio.run(
            run_eosflow(boot, src, dst, n, interval, group, state_dir, count, ops)
        )
    elif name == "eosflow-restore":
        seconds = asyncio.run(run_restore(boot, src, group, state_dir, interval))
    else:
        raise SystemExit(f"unknown contender {name!r}")
    line = {"contender": name, "records": n, "seconds": seconds, "rss_peak_mb": peak_rss_mb()}
    print(json.dumps({**line, **EXTRA}), flush=True)


if __name__ == "__main__":
    main()
