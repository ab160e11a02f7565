"""``Writes`` (``eosflow/_state/_sorted.py``): a layer's writes answer a key range from a
sorted index once one was read, kept as keys are written, reverted and written again --
checked against a plain filter of the dict, over random operations."""

from __future__ import annotations

import random

import pytest

from eosflow._state import _sorted
from eosflow._state._sorted import SortedKeys, Writes


def _naive(w: dict[bytes, bytes | None], lo: bytes | None, hi: bytes | None) -> list[bytes]:
    return sorted(k for k in w if (lo is None or k >= lo) and (hi is None or k < hi))


def _key(rng: random.Random) -> bytes:
    return bytes(rng.randrange(4) for _ in range(rng.randrange(0, 5)))


@pytest.mark.parametrize("seed", range(6))
def test_ranges_match_a_plain_filter_through_writes_reverts_and_rewrites(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sorted, "_HALF", 3)  # small chunks: many splits
    rng = random.Random(seed)
    w = Writes()
    for step in range(3000):
        op = rng.random()
        if op < 0.55:  # a write, as Store._set does it
            k = _key(rng)
            if w.index is not None and k not in w:
                w.index.add(k)
            w[k] = None if rng.random() < 0.2 else b"v"
        elif op < 0.7 and w:  # a failed record's write taken back (Layers.revert)
            w.pop(rng.choice(list(w)))
        else:
            lo = None if rng.random() < 0.2 else _key(rng)
            hi = None if rng.random() < 0.2 else _key(rng)
            got = w.between(lo, hi)
            assert [k for k, _ in got] == _naive(w, lo, hi), (step, lo, hi)
            assert all(v == w[k] for k, v in got)


def test_a_key_added_twice_is_kept_once_and_chunks_stay_ordered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sorted, "_HALF", 2)
    index = SortedKeys([b"m"])
    for k in [b"c", b"a", b"z", b"c", b"b", b"y", b"a", b"x", b"d"]:
        index.add(k)
    assert index.between(None, None) == [b"a", b"b", b"c", b"d", b"m", b"x", b"y", b"z"]
    assert len(index) == 8
    assert index.between(b"b", b"y") == [b"b", b"c", b"d", b"m", b"x"]
    assert index.between(b"zz", None) == []
    assert index.between(b"c", b"c") == []


def test_the_index_is_built_at_the_second_range_read() -> None:
    w = Writes()
    w[b"b"] = b"2"
    w[b"a"] = b"1"
    assert w.between(b"a", b"c") == [(b"a", b"1"), (b"b", b"2")]  # scanned, in order
    assert w.index is None
    assert w.between(b"b", None) == [(b"b", b"2")]
    assert w.index is not None
