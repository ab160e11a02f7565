"""Event-time windows with final results, on the test cluster (fault injection) or the
ladder's broker. Every run is checked from the outside with ``check_windows``: the
finals the input alone gives, each emitted exactly once with its value. The comment
above each test names the mutation that made it fail when the mechanism was taken out."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from kit import T0_MS
from stateful import (
    changelog,
    clicks_at,
    produce_at,
    race_clicks,
    state_config,
    steady,
    until_committed,
)

import eosflow
from eosflow._checks._checker import read_records
from eosflow._protocol import _codes as codes
from eosflow._state._windows import TIME_KEY
from eosflow.testing import FakeCluster, check_windows, read_topic
from examples import clicks

SPEC = eosflow.Tumbling(size_s=10, grace_s=2)


class Clicks(clicks.Clicks):
    """``examples/clicks.py`` with 10 s windows and a 2 s grace (its settings: the window
    is declared in its ``__init__``)."""

    def __init__(self) -> None:
        super().__init__(clicks.Clicks.Settings(window_s=10, grace_s=2))
        assert self.windows == {"clicks": SPEC}


async def windows_ok(bootstrap: str, src: str) -> Any:
    report = await check_windows(bootstrap, src, f"{src}-per-window", SPEC)
    assert report.ok, report.summary()
    assert report.expected > 0
    return report


# Stream time is per input partition: partition 1's clicks, older than everything
# partition 0 processed before them, still fill their own windows, and each partition's
# windows close on its own time. The finals equal those the input alone gives; late
# clicks (older than their window's end plus grace in their own partition) are left out
# and counted once their transaction committed; a closed window's values are deleted
# from the store (its changelog keeps only open windows, and the stream time).
# Caught: stream time taken across partitions (one value for all: partition 1's clicks
# all late, its finals missing); windows closed without deleting their values (every
# later close emitted them again: finals twice); a late click counted into its closed
# window (the count of a final wrong, and an extra final after it was deleted).
async def test_finals_once_per_partition_stream_time_late_and_retention(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c, src = eosflow_cluster, "in"
    app, _clicks = await race_clicks(c, Clicks(), tmp_path, max_records_per_txn=40)
    report = await windows_ok(c.bootstrap_servers, src)
    assert report.late == 1 and app.stats.late == 1
    finals = [
        json.loads(v or b"") | {"key": k}
        for _p, _o, k, v in await read_topic(c.bootstrap_servers, f"{src}-per-window")
    ]
    # partition 1's windows closed on its own time: through [20, 30) at 39.75 s
    starts_of_1 = {f["start_ms"] - T0_MS for f in finals if f["key"].startswith(b"u1-")}
    assert starts_of_1 == {0, 10_000, 20_000}
    at_10 = [f for f in finals if f["start_ms"] - T0_MS == 10_000 and f["key"].startswith(b"u0-")]
    assert sum(f["value"] for f in at_10) == 21
    # the changelog: each partition's stream time, and the values of open windows only
    state = await committed_state(c.bootstrap_servers, changelog("g", src, "clicks"))
    times = {p: struct.unpack(">q", v)[0] for (p, k), v in state.items() if k == TIME_KEY}
    assert times == {0: T0_MS + 94_500, 1: T0_MS + 39_750}
    starts: dict[int, set[int]] = {0: set(), 1: set()}
    for p, k in state:
        if k.startswith(b"w"):
            starts[p].add(struct.unpack(">Q", k[1:9])[0] - 2**63 - T0_MS)
    assert starts == {0: {90_000}, 1: {30_000}}


class TwoWindows(Clicks):
    """Two windows of one spec, each record in both: finals to ``in-per-window`` and
    ``in-again`` (the processor's with several windows, or timers, takes its own path)."""

    def __init__(self) -> None:
        super().__init__()
        self.windows = {"again": SPEC, "clicks": SPEC}  # over Clicks's own, in its __init__

    async def process(self, record: eosflow.Record) -> None:
        await super().process(record)
        self.window("again").update(record.key or b"", lambda n: n + 1, 0)

    async def closed(self, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
        out = await super().closed(key, window, value)
        if window.store == "again":
            out.topic = "in-again"
        return out


# The same clicks through two windows: each closes on the partition's stream time, emits
# every final once, and counts the late click apart. Caught: the handles of a processor
# with several windows asked for their closed windows only when none closed (no final),
# or their late records not counted (late 0).
async def test_two_windows_each_close_and_count_their_late_records(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    c.create_topic("in-again", 1)
    app, _clicks = await race_clicks(c, TwoWindows(), tmp_path, max_records_per_txn=40)
    report = await windows_ok(c.bootstrap_servers, "in")
    again = await check_windows(c.bootstrap_servers, "in", "in-again", SPEC)
    assert again.ok, again.summary()
    assert again.expected == report.expected and report.late == 1
    assert app.stats.late == 2  # once per window


async def committed_state(bootstrap: str, topic: str) -> dict[tuple[int, bytes], bytes]:
    """A changelog folded as a restore sees it: (partition, key) -> last value."""
    state: dict[tuple[int, bytes], bytes] = {}
    for p, _o, k, v in await read_topic(bootstrap, topic):
        if k is None:
            continue
        if v is None:
            state.pop((p, k), None)
        else:
            state[(p, k)] = v
    return state


# A transaction that closed windows and emitted their finals aborts (its forced
# heartbeat refused): the redo closes them again from the stream time the store had
# before it, and emits each final once. Caught: stream time kept in memory rather than
# in the store (the redo found the windows already closed: finals missing).
async def test_an_aborted_close_is_redone(eosflow_cluster: FakeCluster, tmp_path: Path) -> None:
    c = eosflow_cluster
    src = "in"
    c.create_topic(src, 1)
    c.create_topic(f"{src}-per-window", 1)
    await produce_at(c.bootstrap_servers, src, clicks_at(0, steady(0, 60, 0.5)), b"click")
    refused = c.intercept("Heartbeat", version=4, error=codes.UNKNOWN_MEMBER_ID, times=3)
    cfg = state_config(
        c.bootstrap_servers,
        "g",
        src,
        "tx-1",
        tmp_path,
        max_records_per_txn=30,
        group_protocol="classic",  # the aborts come from refusing its forced heartbeat
    )
    app = eosflow.EosApp(Clicks(), cfg)
    async with app:
        await until_committed(c.bootstrap_servers, src, 1, "g", 120, (app,))
    assert refused.hits == 3 and app.stats.aborted == 3
    await windows_ok(c.bootstrap_servers, src)


# Windows live in the changelog: an instance that starts with no local copy (a new
# machine, or the state directory wiped) restores the values and the stream time, and
# the finals stay exactly once across the two. Caught: the stream time not written to
# the store (no stream time to restore: the second instance took each record's own time,
# and the late records went into closed windows); closed windows not deleted (emitted
# again by the second instance).
async def test_windows_and_stream_time_restore_from_the_changelog(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    src = "in"
    c.create_topic(src, 2)
    c.create_topic(f"{src}-per-window", 1)
    first = clicks_at(0, steady(0, 30, 0.5)) + clicks_at(1, steady(0, 30, 0.5))
    await produce_at(c.bootstrap_servers, src, first, b"click")
    cfg = state_config(c.bootstrap_servers, "g", src, "tx-1", tmp_path / "a")
    async with eosflow.EosApp(Clicks(), cfg) as app:
        await until_committed(c.bootstrap_servers, src, 2, "g", len(first), (app,))
    # the second: late records only for a stream time it restored (5 s < 30 - 12)
    then = clicks_at(0, [5.0, 31.0, 45.0]) + clicks_at(1, [5.0, 31.0, 45.0])
    await produce_at(c.bootstrap_servers, src, then, b"click")
    cfg = state_config(c.bootstrap_servers, "g", src, "tx-2", tmp_path / "b")
    async with eosflow.EosApp(Clicks(), cfg) as app:
        await until_committed(c.bootstrap_servers, src, 2, "g", len(first) + len(then), (app,))
    assert app.stats.late == 2
    report = await windows_ok(c.bootstrap_servers, src)
    assert report.late == 2


# With a dead-letter topic, a late record goes there (its error named) instead of being
# counted. Caught: the late check skipped when a dead-letter topic is set (counted, not
# dead-lettered).
async def test_late_records_are_dead_lettered_when_a_topic_is_set(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    src = "in"
    for topic in (src, f"{src}-per-window", "dlq"):
        c.create_topic(topic, 1)
    times = steady(0, 30, 0.5)
    times[40:40] = [3.0, 4.0]  # at 19.5 s: [0, 10) closed at 12 s
    await produce_at(c.bootstrap_servers, src, clicks_at(0, times), b"click")
    cfg = state_config(c.bootstrap_servers, "g", src, "tx-1", tmp_path, dead_letter_topic="dlq")
    async with eosflow.EosApp(Clicks(), cfg) as app:
        await until_committed(c.bootstrap_servers, src, 1, "g", len(times), (app,))
    assert app.stats.late == 0 and app.stats.dead_lettered == 2
    report = await windows_ok(c.bootstrap_servers, src)
    assert report.late == 2
    dead = await read_records(c.bootstrap_servers, "dlq")
    errors = [dict(r.headers)["eosflow.error"] for r in dead]
    assert [dict(r.headers)["eosflow.source"] for r in dead] == [b"in/0/40", b"in/0/41"]
    assert all(e.startswith(b"LateRecord: record at ") for e in errors), errors


# A window's store is the window's: state() refuses its name (and the timers' store's),
# even once the window has been used. Caught: the window's handle cached where state()
# finds it (state('clicks') gave the raw store, stream time and encoded keys included).
async def test_state_refuses_a_windows_name(eosflow_cluster: FakeCluster, tmp_path: Path) -> None:
    c = eosflow_cluster
    src = "in"
    c.create_topic(src, 1)
    c.create_topic(f"{src}-per-window", 1)
    refused: list[str] = []

    class Peeks(Clicks):
        async def process(self, record: eosflow.Record) -> None:
            await super().process(record)
            try:
                self.state("clicks")
            except KeyError as exc:
                refused.append(str(exc))

    await produce_at(c.bootstrap_servers, src, clicks_at(0, [1.0, 2.0]), b"click")
    async with eosflow.EosApp(
        Peeks(), state_config(c.bootstrap_servers, "g", src, "t", tmp_path)
    ) as app:
        await until_committed(c.bootstrap_servers, src, 1, "g", 2, (app,))
    assert refused == ["\"'clicks' is a window: use Processor.window('clicks')\""] * 2
