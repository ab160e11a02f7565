"""The console's ``Recorder``: what an app's reports become on its page -- a point a
second, totals, events with reasons, the partitions held and their offsets, late records
per window -- driven with
real ``TransactionReport``s on a clock the test moves."""

from __future__ import annotations

import json

from pytest import approx

from eosflow._console import EVENTS, TEXT_MAX, WINDOW_S, Console, Recorder
from eosflow._observe import AbortReason, Outcome, SparkJobReport, TransactionReport
from eosflow._records import PartitionOffsets, RestoreProgress, StateNow, StoreSize


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def committed(records: int, commit_ms: float = 4.0) -> TransactionReport:
    phases = (
        ("flush", 10.0, 10.0 + commit_ms / 2e3),
        ("offsets", 10.0, 10.0 + commit_ms / 4e3),
        ("end_txn", 10.0 + commit_ms / 2e3, 10.0 + commit_ms / 1e3),
    )
    return TransactionReport(
        Outcome.COMMITTED, None, None, records, records, 0, 9.0, 0.0, 10.0, phases
    )


def aborted(detail: str) -> TransactionReport:
    return TransactionReport(
        Outcome.ABORTED, AbortReason.PROCESSING_ERROR, detail, 5, 0, 0, 9.0, 0.0, 10.0
    )


def test_each_second_holds_its_commits_and_the_longest_phase() -> None:
    clock = Clock()
    r = Recorder(clock)
    clock.now += 1.2
    r.transaction_ended(committed(100, commit_ms=4.0))
    r.transaction_ended(committed(50, commit_ms=8.0))
    r.transaction_ended(
        TransactionReport(Outcome.EMPTY, None, None, 0, 0, 0, 9.0, 0.0, 10.0)
    )  # no transaction was open: not shown
    clock.now += 1.0
    r.transaction_ended(aborted("asked for a retry"))
    clock.now += 1.0
    s = r.snapshot()
    points = {p["t"]: p for p in s["series"]}
    busy = points[int(1_000_001.2)]
    assert (busy["committed"], busy["records"], busy["not_committed"]) == (2, 150, 0)
    assert busy["commit_p50_ms"] == approx(6.0) and busy["commit_max_ms"] == approx(8.0)
    phases = {
        "flush": approx(4.0),
        "offsets": approx(2.0),
        "heartbeat": None,
        "end_txn": approx(4.0),
    }
    assert busy["phases_ms"] == phases
    assert points[int(1_000_002.2)]["not_committed"] == 1
    assert s["totals"]["committed"] == 2 and s["totals"]["records"] == 150
    assert s["totals"]["not_committed"] == 1
    assert s["commit_p50_ms"] == approx(6.0)  # the last 10 s
    (event,) = s["events"]
    assert event["kind"] == "aborted"
    assert event["text"] == "aborted (processing_error): asked for a retry"
    json.dumps(s, allow_nan=False)  # what the page is sent


def test_the_series_covers_the_last_window_only_and_empty_seconds_are_zero() -> None:
    clock = Clock()
    r = Recorder(clock)
    clock.now += 10
    r.transaction_ended(committed(7))
    clock.now += WINDOW_S + 30
    r.transaction_ended(committed(3))
    clock.now += 2
    s = r.snapshot()
    assert len(s["series"]) == WINDOW_S
    assert sum(p["records"] for p in s["series"]) == 3  # the first fell out of the window
    assert s["series"][-1]["records"] == 0 and s["series"][-1]["commit_p50_ms"] is None
    assert s["totals"]["records"] == 10  # totals keep everything


def test_partitions_held_with_their_offsets_and_the_events_are_bounded() -> None:
    clock = Clock()
    r = Recorder(clock)
    r.partitions_assigned(frozenset({("in", 0), ("in", 1)}))
    none = {"committed": None, "position": None, "last_stable": None, "lag": None}
    assert r.snapshot()["partitions"] == [
        {"topic": "in", "partition": 0, **none},
        {"topic": "in", "partition": 1, **none},
    ]
    r.offsets_sampled({("in", 0): PartitionOffsets(10, 15, 15, 5)})
    size = StoreSize(("in", 0), "per-minute", 12, 4096, 2, 60_000, 150_000)
    r.state_sampled(StateNow([RestoreProgress(("in", 1), "counts", 7, 90, 1.5)], [size]))
    restoring = r.snapshot()["restoring"]
    want = {"topic": "in", "partition": 1, "store": "counts", "applied": 7, "towards": 90}
    assert restoring == [{**want, "seconds": 1.5}]
    assert r.snapshot()["stores"] == [
        {"topic": "in", "partition": 0, "store": "per-minute", "keys": 12, "bytes": 4096}
        | {"windows": 2, "oldest_ms": 60_000, "stream_time_ms": 150_000}
    ]
    r.partitions_revoked(frozenset({("in", 1)}))
    r.producer_reinitialised(AbortReason.UNKNOWN_OUTCOME)
    r.spark_job(SparkJobReport(1.0, 3.5, 1000, cancelled=False))
    s = r.snapshot()
    at = {"committed": 10, "position": 15, "last_stable": 15}
    assert s["partitions"] == [{"topic": "in", "partition": 0, "lag": 5, **at}]
    kinds = [(e["kind"], e["text"]) for e in s["events"]]
    assert kinds == [
        ("assigned", "in[0], in[1]"),
        ("revoked", "in[1]"),
        ("recovered", "producer re-initialised (unknown_outcome)"),
        ("spark", "1000 rows in 2.50 s, done"),
    ]
    for i in range(EVENTS + 10):
        r.transaction_ended(aborted(f"abort {i}"))
    events = r.snapshot()["events"]
    assert len(events) == EVENTS and events[-1]["text"].endswith(f"abort {EVENTS + 9}")


def test_late_records_are_counted_per_window_and_per_second() -> None:
    clock = Clock()
    r = Recorder(clock)
    r.late_records("per-minute", 3)
    r.late_records("per-hour", 1)
    clock.now += 1
    r.late_records("per-minute", 2)
    clock.now += 1
    s = r.snapshot()
    assert s["late"] == [
        {"window": "per-hour", "records": 1},
        {"window": "per-minute", "records": 5},
    ]
    assert [p["late"] for p in s["series"][-2:]] == [4, 2]
    assert s["totals"]["late"] == 6


# The Spark jobs: the longest to end in each second, and their count.
def test_spark_jobs_are_charted_by_their_longest_each_second() -> None:
    clock = Clock()
    r = Recorder(clock)
    r.spark_job(SparkJobReport(1.0, 3.5, 1000))
    r.spark_job(SparkJobReport(2.0, 2.5, 10))
    clock.now += 1
    r.spark_job(SparkJobReport(4.0, 4.25, 5, cancelled=True))
    clock.now += 1
    s = r.snapshot()
    assert [p["spark_max_s"] for p in s["series"][-2:]] == [2.5, 0.25]
    assert s["totals"]["spark_jobs"] == 3


def test_the_console_serves_its_files_and_the_snapshot_with_what_the_app_is() -> None:
    console = Console("orders-app", ["orders"])
    console.name_stages(
        {"regroup": ["orders"], "count": ["orders-app-by-product"]},
        {"regroup": "orders-app-by-product"},
    )
    routes = console.routes()
    status, kind, page = routes["/"]()
    assert status == 200 and kind.startswith("text/html")
    assert b'src="/console/console.js"' in page and b'href="/console/console.css"' in page
    for path in ("/console/console.js", "/console/console.css"):
        assert routes[path]()[0] == 200 and routes[path]()[2]
    status, kind, body = routes["/console/snapshot.json"]()
    about = json.loads(body)["about"]
    assert about == {
        "group": "orders-app",
        "inputs": ["orders"],
        "stages": [
            {"name": "regroup", "reads": ["orders"], "regroups_to": "orders-app-by-product"},
            {"name": "count", "reads": ["orders-app-by-product"], "regroups_to": None},
        ],
    }


# The seconds are summed up as they pass, whether or not a page asks: an app with a
# metrics port that nobody watches keeps WINDOW_S points, not one a second for ever.
# (Pruned only by snapshot(), the recorder held 1,000 here.)
def test_memory_stays_bounded_with_no_page_open() -> None:
    clock = Clock()
    r = Recorder(clock)
    for _ in range(1000):
        clock.now += 1.0
        r.transaction_ended(committed(1))
    assert len(r._seconds) <= WINDOW_S + 1
    assert sum(p["records"] for p in r.snapshot()["series"]) == WINDOW_S


def test_an_events_text_is_cut() -> None:
    r = Recorder(Clock())
    r.transaction_ended(aborted("x" * 5000))
    (event,) = r.snapshot()["events"]
    assert len(event["text"]) == TEXT_MAX and event["text"].endswith("\u2026")
