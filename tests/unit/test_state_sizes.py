"""What the console is shown of the state stores (``_state/_sizes.py``), on real RocksDB
local copies: keys counted by a walk of a bounded number of keys a sample, resumed
where the last sample stopped; bytes; a window's windows open and stream time. And the
check, moved out of ``Stores`` beside it, that a timer's commit metadata fits."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

import eosflow
from eosflow import ConfigError
from eosflow._records import StoreSize
from eosflow._state._changelog import check_written_fits
from eosflow._state._local import EMPTY, Env, LocalPartition
from eosflow._state._sessions import ENDS, key_part
from eosflow._state._sizes import Sizes
from eosflow._state._store import RESERVED_KEY
from eosflow._state._windows import TIME_KEY, data_key

P, Q = ("in", 0), ("in", 1)
WINDOW = {"w": eosflow.Tumbling(size_s=60, grace_s=100)}  # at 150 s, [0, 60 s) still open


def put(local: LocalPartition, store: str, keys: dict[bytes, bytes | None]) -> None:
    local.apply({store: keys}, {store: EMPTY})


# A store of 4 keys overwritten 200 times each and one of 2, walked 2 keys a sample: no
# figure until a walk ends (None), then exactly 4 -- where RocksDB's estimate counts the
# overwrites. The position record is eosflow's, not counted. Mutations caught: a walk
# restarted at each sample instead of resumed (never ends: None for ever); the budget
# given whole to each store (the second store counted in the third sample).
def test_keys_are_counted_over_samples_resuming_where_the_last_stopped(tmp_path: Path) -> None:
    local = LocalPartition(tmp_path, P, ["counts", "other"], Env())
    for n in range(200):
        put(local, "counts", {f"k{i}".encode(): str(n).encode() for i in range(4)})
    put(local, "counts", {RESERVED_KEY: b"position"})
    put(local, "other", {b"a": b"1", b"b": b"2"})
    sizes = Sizes(keys_per_sample=2)
    seen = [sizes.sample({P: local}, {P}, {}) for _ in range(4)]
    assert [[s.keys for s in sample] for sample in seen] == [
        [None, None],  # counts: the position record (first in byte order), k0
        [None, None],  # counts: k1, k2
        [4, None],  # counts: k3, its last key: done; other: a -- the budget spent
        [4, 2],  # other: b, its last: done; counts: walked again from its first
    ]
    estimate = local._cf["counts"].property_int_value("rocksdb.estimate-num-keys")
    assert estimate > 100  # what the count replaces
    assert all(s.bytes > 0 for s in seen[-1]) and seen[-1][0].windows is None
    local.close()


# A walk ends at the key that was its store's last when it began: a store growing past
# it faster than the walk goes still gets its count, and the store after it its turn.
# A wipe voids what was counted. Mutation caught: the walk run to the store's end as it
# is now (never ends: the second store never counted).
def test_a_growing_store_does_not_hold_the_walk_and_a_wipe_voids_its_count(
    tmp_path: Path,
) -> None:
    local = LocalPartition(tmp_path, P, ["grows", "small"], Env())
    put(local, "grows", {f"k{i:06d}".encode(): b"1" for i in range(3)})
    put(local, "small", {b"x": b"1"})
    sizes, added = Sizes(keys_per_sample=2), 3
    for _ in range(3):
        sizes.sample({P: local}, {P}, {})
        put(local, "grows", {f"k{i:06d}".encode(): b"1" for i in range(added, added + 5)})
        added += 5
    grows, small = sizes.sample({P: local}, {P}, {})
    assert (grows.keys, small.keys) == (3, 1), (grows, small)
    local.wipe("small")
    assert sizes.sample({P: local}, {P}, {})[1].keys is None  # counted again from scratch
    local.close()


# A partition not ready (restoring) or without a local copy is not listed, and a store
# of a partition no longer held is forgotten. Deleted keys are not counted.
def test_only_ready_copies_are_listed_and_deletes_count(tmp_path: Path) -> None:
    env = Env()
    a, b = LocalPartition(tmp_path, P, ["s"], env), LocalPartition(tmp_path, Q, ["s"], env)
    put(a, "s", {b"x": b"1", b"y": b"2"})
    put(a, "s", {b"x": None})
    sizes = Sizes()
    assert [(s.partition, s.keys) for s in sizes.sample({P: a, Q: b}, {P}, {})] == [(P, 1)]
    assert [(s.partition, s.keys) for s in sizes.sample({P: a, Q: b}, {P, Q}, {})] == [
        (P, 1),
        (Q, 0),
    ]
    assert sizes.sample({Q: b}, {Q}, {}) == [StoreSize(Q, "s", 0, b.size("s"))]
    a.close()
    b.close()


# A window store: the windows holding values (one seek each: 3 windows of 4 keys), the
# oldest one's start and the stream time; its stream time key is not counted as a key.
# Both the seeks and the key walk start at the oldest start that can still be open
# (stream time - size - grace), not over the deletions of the windows closed before it:
# a window key before it, which the engine never leaves, is not reached. Mutations
# caught: windows counted by key (12 open); the scans begun at the first key (the stray
# window counted).
def test_a_windows_open_windows_and_stream_time(tmp_path: Path) -> None:
    local = LocalPartition(tmp_path, P, ["w"], Env())
    rows: dict[bytes, bytes | None] = {
        data_key(start, f"u{k}".encode()): b"1" for start in (0, 60_000, 120_000) for k in range(4)
    }
    rows[TIME_KEY] = struct.pack(">q", 150_000)
    rows[data_key(-20_000, b"stray")] = b"1"  # closed at 140 s at the latest: never kept
    put(local, "w", rows)
    (size,) = Sizes().sample({P: local}, {P}, WINDOW)
    assert (size.keys, size.windows, size.oldest_ms, size.stream_time_ms) == (12, 3, 0, 150_000)
    put(local, "w", {data_key(0, f"u{k}".encode()): None for k in range(4)})  # [0, 60 s) closed
    (size,) = Sizes().sample({P: local}, {P}, WINDOW)
    assert (size.keys, size.windows, size.oldest_ms) == (8, 2, 60_000)
    local.close()


# With timers a commit's metadata names every store; too many (or too long) names for
# Kafka's default 4,096 characters are refused in one line at start, not at a commit.
def test_stores_whose_names_overflow_the_commit_metadata_are_refused() -> None:
    check_written_fits([f"store-{i}" for i in range(10)])
    with pytest.raises(ConfigError, match=r"^with timers, .* over Kafka's 4096 ") as e:
        check_written_fits([f"a-rather-long-store-name-{i}" for i in range(200)])
    assert "\n" not in str(e.value)


# A session window: its sessions counted by the walk (one closing-order key each, as
# ``_sessions`` keeps them), its keys the sessions' values, its stream time read. Three
# sessions of two users, walked 2 keys a sample. Mutation caught: the end keys not told
# apart (0 sessions).
def test_a_session_windows_sessions_are_counted(tmp_path: Path) -> None:
    local = LocalPartition(tmp_path, P, ["s"], Env())
    t = struct.Struct(">Q")
    rows: dict[bytes, bytes | None] = {TIME_KEY: struct.pack(">q", 90_000)}
    for user, start, end in ((b"u1", 0, 5_000), (b"u1", 60_000, 61_000), (b"u2", 1_000, 2_000)):
        rows[b"s" + key_part(user) + t.pack(start + 2**63)] = t.pack(end + 2**63) + b"1"
        rows[ENDS + t.pack(end + 2**63) + key_part(user) + t.pack(start + 2**63)] = b""
    put(local, "s", rows)
    sizes = Sizes(keys_per_sample=2)
    for _ in range(3):
        (size,) = sizes.sample({P: local}, {P}, {"s": eosflow.Session(gap_s=60)})
        assert size.keys is None  # 7 keys, the stream time among them: still walking
    (size,) = sizes.sample({P: local}, {P}, {"s": eosflow.Session(gap_s=60)})
    assert (size.keys, size.windows, size.stream_time_ms) == (3, 3, 90_000), size
    local.close()
