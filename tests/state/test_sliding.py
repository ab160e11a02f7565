"""Sliding windows (``eosflow.Sliding``) on the test cluster, checked from the outside
with ``check_windows`` (the windows the input alone gives, each final exactly once). The
comment above each test names the mutation that made it fail when the mechanism was taken
out."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from kit import T0_MS
from stateful import changelog, in_two_halves, produce_at, state_config, until_committed

import eosflow
from eosflow._records import Record
from eosflow.testing import FakeCluster, check_windows, expected_windows, read_topic

SPEC = eosflow.Sliding(size_s=10, grace_s=2)


class Recent(eosflow.Processor):
    """Per key, the records within 10 s of each other: each window's count, once."""

    windows = {"recent": SPEC}

    def configure(self, config: eosflow.EosConfig) -> None:
        self.topic = f"{config.input_topics[0]}-recent"

    async def process(self, record: eosflow.Record) -> None:
        self.sliding("recent").add(record.key or b"", 1)

    async def closed(self, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
        final = {"start_ms": window.start_ms, "end_ms": window.end_ms, "value": len(value)}
        return eosflow.Output(self.topic, json.dumps(final), key=key)


def test_the_windows_of_a_few_records_are_kafka_streams_sliding_windows() -> None:
    """By hand, size 10 s: records of a at 0, 5 and 30 s give [-10, 0] {0}, [-5, 5]
    {0, 5}, [0.001, 10.001] {5} (after 0, which 5 follows within 10 s), [20, 30] {30};
    nothing after 5 or 30 (no record follows within 10 s)."""
    records = [Record("in", 0, i, b"a", b"", (), t) for i, t in enumerate((0, 5_000, 30_000))] + [
        Record("in", 0, 3, b"z", b"", (), 100_000)
    ]  # closes them all
    finals, late = expected_windows(records, SPEC)
    assert {s: v for (k, s), v in finals.items() if k == b"a"} == {
        -10_000: 1,
        -5_000: 2,
        1: 1,
        20_000: 1,
    }
    assert late == 0
    # Kafka Streams' own example (SlidingWindows' Javadoc): a time difference of 5 s,
    # records at 8, 9.2 and 12.4 s give five windows
    five = eosflow.Sliding(size_s=5)
    records = [Record("in", 0, i, b"A", b"", (), t) for i, t in enumerate((8_000, 9_200, 12_400))]
    records.append(Record("in", 0, 3, b"z", b"", (), 60_000))
    finals, _late = expected_windows(records, five)
    assert {s: v for (k, s), v in finals.items() if k == b"A"} == {
        3_000: 1,  # [3000;8000]
        4_200: 2,  # [4200;9200]
        7_400: 3,  # [7400;12400]
        8_001: 2,  # [8001;13001]
        9_201: 1,  # [9201;14201]
    }


# Visits of 20 keys on two partitions, some out of order within the grace and some
# late, across two instances (the second restores the contributions): every window's
# count once, as the input alone gives, and the changelog keeps only what an open
# window may need. Caught: the windows after a record not emitted (finals missing); a
# contribution deleted while an open window still needed it (counts short); late
# records added (counts long); contributions never deleted (kept in the changelog).
async def test_sliding_windows_close_once_with_their_counts_across_a_restore(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    src = "in"
    c.create_topic(src, 2)
    c.create_topic(f"{src}-recent", 1)
    rng = random.Random(20261127)
    events: list[tuple[int, bytes, int]] = []
    for p in (0, 1):
        t = 0
        for _ in range(300):
            t += rng.choice((100, 800, 3_000, 9_000, 15_000))
            ts = t - (rng.randrange(4_000) if rng.random() < 0.15 else 0)  # out of order
            events.append((p, f"u{p}-{rng.randrange(10)}".encode(), ts))
    await in_two_halves(c.bootstrap_servers, src, 2, events, Recent, tmp_path, b"v")
    report = await check_windows(c.bootstrap_servers, src, f"{src}-recent", SPEC)
    assert report.ok, report.summary()
    assert report.expected > 500 and report.late > 0
    # what the changelog still holds: only contributions an open window may need
    live: dict[bytes, int] = {}
    for p, _o, k, v in await read_topic(c.bootstrap_servers, changelog("g", src, "recent")):
        if k is not None and k.startswith(b"k"):
            if v is None:
                live.pop(k, None)
            else:
                live[k] = p
    stream = {p: max(t for q, _k, t in events if q == p) for p in (0, 1)}
    oldest = {p: stream[p] - SPEC.grace_ms - 1 - SPEC.size_ms for p in (0, 1)}
    kept = [int.from_bytes(k[-16:-8], "big") - 2**63 for k in live]
    assert live and all(t >= min(oldest.values()) for t in kept), (len(live), oldest)


# Kafka Streams' example end to end: the five windows, each emitted once with its count.
# Caught: the windows after a record not emitted (two missing).
async def test_kafka_streams_example_end_to_end(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    c.create_topic("in", 1)
    c.create_topic("in-recent", 1)
    five = eosflow.Sliding(size_s=5)

    class Five(Recent):
        windows = {"recent": five}

    events = [(0, b"A", t) for t in (8_000, 9_200, 12_400)] + [(0, b"z", 60_000)]
    await produce_at(c.bootstrap_servers, "in", events, b"v")
    async with eosflow.EosApp(
        Five(), state_config(c.bootstrap_servers, "g", "in", "t", tmp_path)
    ) as app:
        await until_committed(c.bootstrap_servers, "in", 1, "g", 4, (app,))
    got = [
        json.loads(v or b"") for _p, _o, k, v in await read_topic(c.bootstrap_servers, "in-recent")
    ]
    assert [(f["start_ms"] - T0_MS, f["end_ms"] - T0_MS, f["value"]) for f in got] == [
        (3_000, 8_001, 1),
        (4_200, 9_201, 2),
        (7_400, 12_401, 3),
        (8_001, 13_002, 2),
        (9_201, 14_202, 1),
    ]
