"""``Placement`` (``_state/_placement.py``): which records of a co-partitioned topic it
checks -- the first 16 records of each partition read, then one in 1024 -- and
what it lets by (keys where murmur2 puts them, records without a key, topics of one
partition or not co-partitioned)."""

from __future__ import annotations

import pytest
from kit import key_in

import eosflow
from eosflow._state._placement import EVERY, FIRST, Placement


def run(
    n: int, partition: int = 1, bad_at: int | None = None, start: int = 0
) -> list[eosflow.Record]:
    """``n`` records of ``t[partition]`` (4 partitions), keyed where murmur2 puts them,
    but the one at index ``bad_at``, keyed for another partition."""
    good = key_in(partition, 4, "k")
    bad = key_in((partition + 1) % 4, 4, "k")
    return [
        eosflow.Record("t", partition, start + i, bad if i == bad_at else good, b"v")
        for i in range(n)
    ]


def checked() -> Placement:
    p = Placement()
    p.expect({"t": 4, "single": 1})
    return p


def test_well_placed_keys_and_keyless_records_pass() -> None:
    p = checked()
    p.check(run(3 * EVERY))
    p.check([eosflow.Record("t", 2, 0, None, b"v")])


@pytest.mark.parametrize("at", [0, FIRST - 1, EVERY, 2 * EVERY])
def test_a_misplaced_key_among_the_sampled_stops_with_one_line(at: int) -> None:
    with pytest.raises(eosflow.FatalError) as err:
        checked().check(run(3 * EVERY, bad_at=at))
    said = str(err.value)
    assert "t[1] holds key" in said and f"at offset {at}," in said and "\n" not in said


def test_sampling_counts_across_polls() -> None:
    """The record at index EVERY of a partition is checked however the polls cut it."""
    p = checked()
    p.check(run(EVERY - 20))
    with pytest.raises(eosflow.FatalError, match=f"at offset {EVERY},"):
        p.check(run(30, bad_at=20, start=EVERY - 20))  # past the poll's own first 16


def test_records_between_samples_and_other_topics_are_not_read() -> None:
    p = checked()
    p.check(run(3 * EVERY, bad_at=FIRST + 1))  # not sampled: the price of sampling
    p.check([eosflow.Record("single", 0, 0, b"anything", b"v")])  # one partition
    p.check([eosflow.Record("other", 3, 0, b"anything", b"v")])  # not co-partitioned
