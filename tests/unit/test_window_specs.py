"""Window specs and their arithmetic, the declarations' one-line errors, and the
expected finals the checker computes from an input (no broker)."""

from __future__ import annotations

from typing import Any

import pytest

import eosflow
from eosflow._state import Stores, declared, state_settings
from eosflow.testing import expected_windows


def test_tumbling_windows_hold_each_time_once() -> None:
    w = eosflow.Tumbling(size_s=300, grace_s=10)
    assert (w.size_ms, w.advance_ms, w.grace_ms) == (300_000, 300_000, 10_000)
    assert list(w.starts(0)) == [0]
    assert list(w.starts(299_999)) == [0]
    assert list(w.starts(300_000)) == [300_000]
    assert list(w.starts(-1)) == [-300_000]  # a record without a timestamp (-1)


def test_hopping_windows_hold_each_time_size_over_advance_times() -> None:
    w = eosflow.Hopping(size_s=10, advance_s=5)
    assert list(w.starts(7_000)) == [0, 5_000]
    assert list(w.starts(5_000)) == [0, 5_000]
    assert list(w.starts(4_999)) == [-5_000, 0]
    odd = eosflow.Hopping(size_s=10, advance_s=3)  # advance not dividing the size
    assert list(odd.starts(10_000)) == [3_000, 6_000, 9_000]
    assert list(odd.starts(9_999)) == [0, 3_000, 6_000, 9_000]


def test_a_window_closes_at_its_end_plus_grace() -> None:
    w = eosflow.Tumbling(size_s=300, grace_s=10)
    assert w.closed_through(310_000) == 0  # [0, 300 s) closed at 310 s
    assert w.closed_through(309_999) == -300_000
    h = eosflow.Hopping(size_s=10, advance_s=5, grace_s=0)
    assert h.closed_through(15_000) == 5_000
    assert h.closed_through(14_999) == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: eosflow.Tumbling(size_s=0), "Tumbling: size_s must be > 0, not 0"),
        (lambda: eosflow.Tumbling(size_s=-5), "Tumbling: size_s must be > 0, not -5"),
        (
            lambda: eosflow.Hopping(size_s=10, advance_s=20),
            "Hopping: advance_s must be > 0 and at most size_s (10), not 20",
        ),
        (lambda: eosflow.Tumbling(size_s=10, grace_s=-1), "Tumbling: grace_s must be >= 0, not -1"),
        (
            lambda: eosflow.Tumbling(size_s="10"),  # type: ignore[arg-type]
            "Tumbling: size_s must be a number of seconds, not '10'",
        ),
        (lambda: eosflow.Tumbling(size_s=0.0001), "Tumbling: windows are in whole milliseconds"),
    ],
)
def test_a_spec_that_cannot_work_is_one_line(make: Any, message: str) -> None:
    with pytest.raises(eosflow.ConfigError) as got:
        make()
    assert str(got.value).startswith(message) and "\n" not in str(got.value)


def test_declarations_are_checked_in_one_line() -> None:
    class Both(eosflow.Processor):
        stores = {"clicks": eosflow.JSON}
        windows = {"clicks": eosflow.Tumbling(size_s=60)}

    class NotASpec(eosflow.Processor):
        windows = {"clicks": 60}  # type: ignore[dict-item]

    class Fine(eosflow.Processor):
        stores = {"seen": eosflow.JSON}
        windows = {"clicks": eosflow.Tumbling(size_s=60)}

    with pytest.raises(eosflow.ConfigError, match="'clicks' names both a store and a window"):
        declared(Both())
    with pytest.raises(eosflow.ConfigError, match=r"windows\['clicks'\]: expected a name and"):
        declared(NotASpec())

    class InARegistry(eosflow.Processor):  # a window's values are not kept in a registry
        windows = {"clicks": eosflow.Tumbling(size_s=60, serde=eosflow.Avro(schema='"long"'))}  # type: ignore[arg-type]

    with pytest.raises(eosflow.ConfigError, match=r"^InARegistry.windows\['clicks'\].serde is"):
        declared(InARegistry())
    assert declared(Fine()) == {"seen": eosflow.JSON, "clicks": eosflow.BYTES}


def rec(partition: int, offset: int, key: bytes, t_ms: int) -> eosflow.Record:
    return eosflow.Record("in", partition, offset, key, b"", timestamp=t_ms)


def test_expected_finals_follow_each_partitions_stream_time() -> None:
    spec = eosflow.Tumbling(size_s=10, grace_s=2)
    records = [
        rec(0, 0, b"a", 1_000),
        rec(0, 1, b"a", 9_000),
        rec(0, 2, b"a", 11_000),  # [0, 10) in grace until 12 s
        rec(0, 3, b"a", 5_000),  # counts: stream time 11 s < 12 s
        rec(0, 4, b"a", 12_500),  # closes [0, 10)
        rec(0, 5, b"a", 6_000),  # late
        rec(1, 0, b"b", 3_000),  # partition 1 is behind: its own stream time
        rec(1, 1, b"b", 22_000),  # closes [0, 10) of b
    ]
    finals, late = expected_windows(records, spec)
    assert finals == {(b"a", 0): 3, (b"b", 0): 1}  # [10, 20) of a not closed (12.5 s)
    assert late == 1


def test_timers_keep_a_store_of_their_own_name() -> None:
    class Timed(eosflow.Processor):
        stores = {"timers": eosflow.JSON}

        async def fire(self, timer: eosflow.Timer) -> None:
            return None

    class Untimed(eosflow.Processor):
        stores = {"timers": eosflow.JSON}  # no fire: a store like any other

    with pytest.raises(eosflow.ConfigError, match=r"has timers \(it overrides fire\), which keep"):
        declared(Timed())
    assert declared(Untimed()) == {"timers": eosflow.JSON}


def test_a_session_spec_that_cannot_work_is_one_line() -> None:
    with pytest.raises(eosflow.ConfigError, match=r"^Session: gap_s must be > 0, not 0$"):
        eosflow.Session(gap_s=0)
    with pytest.raises(eosflow.ConfigError, match=r"^Session: grace_s must be >= 0, not -1$"):
        eosflow.Session(gap_s=5, grace_s=-1)
    s = eosflow.Session(gap_s=5, grace_s=1)
    assert (s.gap_ms, s.grace_ms) == (5_000, 1_000)
    assert s.closed_through(20_000) == 14_000  # a session ending by 14 s is closed


def test_expected_sessions_merge_bridged_sessions_and_count_late_records() -> None:
    spec = eosflow.Session(gap_s=5, grace_s=1)
    records = [
        rec(0, 0, b"a", 0),
        rec(0, 1, b"a", 2_000),  # [0, 2]
        rec(0, 2, b"a", 7_500),  # a new one: [7.5, 7.5] ([0, 2] closes at 8 s)
        rec(0, 3, b"a", 5_000),  # bridges both: [0, 7.5], 4 records
        rec(0, 4, b"b", 30_000),  # stream time 30 s: [0, 7.5] of a closed (7.5 <= 24)
        rec(0, 5, b"a", 12_000),  # its session would end at 12 <= 24: late
        rec(0, 6, b"b", 31_000),  # [30, 31], open
    ]
    finals, late = expected_windows(records, spec)
    assert finals == {(b"a", 0): 4}
    assert late == 1


def test_a_sliding_spec_that_cannot_work_is_one_line() -> None:
    with pytest.raises(eosflow.ConfigError, match=r"^Sliding: size_s must be > 0, not 0$"):
        eosflow.Sliding(size_s=0)
    with pytest.raises(eosflow.ConfigError, match=r"^Sliding: grace_s must be >= 0, not -1$"):
        eosflow.Sliding(size_s=5, grace_s=-1)
    with pytest.raises(eosflow.ConfigError, match=r"^Sliding: size_s must be a number"):
        eosflow.Sliding(size_s="5")  # type: ignore[arg-type]
    s = eosflow.Sliding(size_s=5, grace_s=1)
    assert (s.size_ms, s.grace_ms) == (5_000, 1_000)
    assert s.closed_through(20_000) == 18_999  # closed once stream time passes end + grace


def test_timers_with_stores_too_many_for_a_commits_metadata_are_one_line() -> None:
    class Many(eosflow.Processor):
        stores = {f"store-{i:03d}-{'x' * 40}": eosflow.JSON for i in range(80)}

        async def fire(self, timer: eosflow.Timer) -> None:
            return None

    cfg = eosflow.EosConfig(
        bootstrap_servers="127.0.0.1:9", group_id="g", input_topics=("in",), transactional_id="t"
    )
    with pytest.raises(eosflow.ConfigError, match=r"^with timers, a commit's offset metadata"):
        Stores(state_settings(cfg), declared(Many()), lambda p: None, lambda e: None)
    few = {"counts": eosflow.JSON, "timers": eosflow.BYTES}
    Stores(state_settings(cfg), few, lambda p: None, lambda e: None)  # well under
