"""Stores and windows kept by ``process_batch`` (``Processor.batch``): per-key partial
aggregates merged into the state, windows closed after the batch. A batch processor's
finals must equal those the input alone gives (``check_windows``), as the per-record
path's do. The comment above each test names the mutation that made it fail when the
mechanism was taken out."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from kit import T0_MS
from stateful import clicks_at, produce_at, race_clicks, state_config, steady, until_committed
from test_windows import SPEC, committed_state

import eosflow
from eosflow.testing import FakeCluster, check_windows, read_topic

Partition = tuple[str, int]


def _add(old: int | None, partial: int) -> int:
    return (old or 0) + partial


class BatchClicks(eosflow.Processor):
    """Clicks per user and window, counted a batch at a time: each key's clicks per
    window summed over the batch, then merged into the window (as a Spark ``groupBy``
    would hand them over). Finals as ``examples/clicks.py`` emits them."""

    windows: Any = {"clicks": SPEC}
    batches = 0

    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        batch, partials = self.batch, Counter[tuple[Partition, bytes, int]]()
        assert list(records) == batch.records
        for i, start in batch.windows("clicks"):
            r = records[i]
            partials[((r.topic, r.partition), r.key or b"", start)] += 1
        for (partition, key, start), n in sorted(partials.items()):
            batch.merge("clicks", partition, key, n, _add, start_ms=start)
        type(self).batches += 1
        return []

    async def closed(self, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
        final = {"start_ms": window.start_ms, "end_ms": window.end_ms, "value": value}
        return eosflow.Output("in-per-window", json.dumps(final), key=key)


# The test of the per-record path (test_windows), run by a batch processor in batches of
# at most 40: partition 1 far behind partition 0, a click in its window's grace and a
# late one inside one batch. The finals equal the input's; the late click is counted
# once; closed windows leave the changelog. Caught: a record's windows taken at its own
# time only, not those open at its partition's stream time (the late click not counted
# late, and merged into a window already emitted); the windows closed before the batch
# taken at its last record rather than its first (no final emitted); no closing after
# the batch (no finals at all).
async def test_batch_finals_equal_the_inputs_with_late_records_and_retention(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c, src = eosflow_cluster, "in"
    app, clicks = await race_clicks(c, BatchClicks(), tmp_path, max_records_per_txn=40)
    report = await check_windows(c.bootstrap_servers, src, f"{src}-per-window", SPEC)
    assert report.ok, report.summary()
    assert report.expected > 0 and report.late == 1 and app.stats.late == 1
    assert BatchClicks.batches >= clicks // 40
    state = await committed_state(c.bootstrap_servers, f"g--{src}--clicks--changelog")
    starts = {(p, int.from_bytes(k[1:9]) - 2**63 - T0_MS) for p, k in state if k.startswith(b"w")}
    assert starts == {(0, 90_000), (1, 30_000)}


HOP = eosflow.Hopping(size_s=10, advance_s=4, grace_s=1)


class BatchHops(BatchClicks):
    windows: Any = {"clicks": HOP}


# Hopping windows: a record is in each of its open windows (windows() lists it once per
# window), and a window that closed on the way to a record's time takes no more of its
# clicks. Caught: one window per record (the first) instead of each of them.
async def test_batch_hopping_windows_equal_the_inputs(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    src = "in"
    c.create_topic(src, 1)
    c.create_topic(f"{src}-per-window", 1)
    times = steady(0, 60, 0.3)
    times[100:100] = [26.5, 20.0]  # at 30 s: [20, 30) in its grace; [16, 26) closed (late)
    await produce_at(c.bootstrap_servers, src, clicks_at(0, times), b"click")
    cfg = state_config(c.bootstrap_servers, "g", src, "tx-1", tmp_path, max_records_per_txn=64)
    async with eosflow.EosApp(BatchHops(), cfg) as app:
        await until_committed(c.bootstrap_servers, src, 1, "g", len(times), (app,))
    report = await check_windows(c.bootstrap_servers, src, f"{src}-per-window", HOP)
    assert report.ok, report.summary()
    assert report.expected > 0


class BatchTotals(eosflow.Processor):
    """A running count per key in a store, merged a batch at a time; each batch emits
    its keys' new totals. A record whose value is b"boom" fails its batch."""

    stores: Any = {"totals": eosflow.JSON}

    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        partials = Counter((r.topic, r.partition, r.key or b"") for r in records)
        out = []
        for (topic, p, key), n in sorted(partials.items()):
            total = self.batch.merge("totals", (topic, p), key, n, _add)
            out.append(eosflow.Output("totals", str(total), key=key))
        if any(r.value == b"boom" for r in records):
            raise ValueError("boom")
        return out


# With a dead-letter topic, a batch that raises after merging leaves no write behind
# and its records are dead-lettered: the totals count only the batches that committed.
# Caught: the batch's merges kept when it failed (the totals count the dead-lettered
# records too).
async def test_a_failing_batch_takes_back_its_merges(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    src = "in"
    c.create_topic(src, 1)
    for t in ("totals", "dlq"):
        c.create_topic(t, 1)
    events = [(0, f"k{i % 3}".encode(), 1000 + i) for i in range(30)]
    await produce_at(c.bootstrap_servers, src, events[:10], b"v")
    cfg = state_config(c.bootstrap_servers, "g", src, "tx-1", tmp_path, dead_letter_topic="dlq")
    async with eosflow.EosApp(BatchTotals(), cfg) as app:
        await until_committed(c.bootstrap_servers, src, 1, "g", 10, (app,))
        await produce_at(c.bootstrap_servers, src, events[10:11], b"boom")
        await until_committed(c.bootstrap_servers, src, 1, "g", 11, (app,))
        await produce_at(c.bootstrap_servers, src, events[11:], b"v")
        await until_committed(c.bootstrap_servers, src, 1, "g", 30, (app,))
    assert app.stats.dead_lettered == 1
    dead = await read_topic(c.bootstrap_servers, "dlq")
    assert [v for _p, _o, _k, v in dead] == [b"boom"]
    last: dict[bytes, int] = {}
    for _p, _o, k, v in await read_topic(c.bootstrap_servers, "totals"):
        last[k or b""] = int(v or b"0")
    expected = Counter(k for i, (_n, k, _t) in enumerate(events) if i != 10)
    assert last == dict(expected)


class Sessions(eosflow.Processor):
    windows: Any = {"s": eosflow.Session(gap_s=5)}

    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        return []


class Timed(eosflow.Processor):
    stores: Any = {"x": eosflow.JSON}

    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        return []

    async def fire(self, timer: eosflow.Timer) -> None:
        return None


@pytest.mark.parametrize(
    ("processor", "says"),
    [(Sessions, "its window 's' is a Session"), (Timed, "overrides process_batch and fire")],
)
def test_a_batch_refuses_what_it_cannot_keep(
    processor: type[eosflow.Processor], says: str, tmp_path: Path
) -> None:
    cfg = state_config("127.0.0.1:9", "g", "in", "tx-1", tmp_path)
    with pytest.raises(eosflow.ConfigError, match=says):
        eosflow.EosApp(processor(), cfg)
