"""``WindowStore``'s stream time and closing against their definition, record by record,
over random specs and event times (negative ones, an advance that does not divide the
size, out-of-order and late records): a window ``[s, s + size)`` is open while its
partition's stream time is below ``s + size + grace``; a record goes into each of its
open windows; every window is handed to ``closing`` once, at the record whose stream time
first reaches its close, with every value it took. The comment above each test names the
mutation that made it fail."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pytest

import eosflow
from eosflow._state._layers import Layers
from eosflow._state._local import Env, LocalPartition
from eosflow._state._store import BYTES, Store
from eosflow._state._windows import TIME_KEY, WindowStore

P = ("in", 0)


def specs(rng: random.Random) -> list[Any]:
    out: list[Any] = []
    for _ in range(12):
        size = rng.randint(1, 9)
        grace = rng.choice([0, 0, rng.randint(1, 5)])
        if rng.random() < 0.5:
            out.append(eosflow.Tumbling(size_s=size, grace_s=grace))
        else:
            out.append(eosflow.Hopping(size_s=size, advance_s=rng.randint(1, size), grace_s=grace))
    return out


# Caught: update answering another window than the record's (the tumbling path keeping
# the Window of the first it wrote); the next close computed one millisecond late (a
# record whose stream time is exactly a window's close went into it, and the window
# closed a record late); the next close's stream time taken with the grace twice
# (windows closed late, late records counted into them).
@pytest.mark.parametrize("seed", range(4))
def test_windows_open_and_close_as_defined(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    local = LocalPartition(tmp_path, P, ["w"], Env())
    for n, spec in enumerate(specs(rng)):
        layers = Layers()
        store: Store[Any] = Store("w", P, BYTES, layers, local)
        # each spec its own window store: the same column family, a fresh layer and keys
        h = WindowStore("w", spec, store)
        key = f"k{seed}-{n}".encode()
        size, step, grace = spec.size_ms, spec.advance_ms, spec.grace_ms
        stream = None
        counts: dict[int, int] = {}  # window start -> records in it (the definition)
        emitted: dict[int, int] = {}
        base = rng.randint(-30_000, 30_000) // 1000 * 1000
        for _ in range(300):
            t = base + rng.randint(-4000, 4000) + rng.choice([0, 0, 1000]) * rng.randint(0, 3)
            base = max(base, t - 2000)
            t = t - t % 1000 + rng.choice([0, 0, 0, 1, 999])  # near window bounds often
            stream = t if stream is None else max(stream, t)
            now = stream
            before = h.advance(t)
            lo = (t - size) - (t - size) % step  # a start at or below every window of t
            mine = [s for s in range(lo, t + 1, step) if s <= t < s + size]
            want = [s for s in mine if s + size + grace > now]
            assert list(h.open_starts()) == want, (spec, t, now)
            got = h.update(key, lambda v: v + 1, 0)
            for s in want:
                counts[s] = counts.get(s, 0) + 1
            # what an app emitting on every update sends: each open window, its new value
            assert [(w.store, w.start_ms, w.end_ms, v) for w, v in got] == [
                ("w", s, s + size, counts[s]) for s in want
            ], (spec, t)
            for window, k, value in h.closing(before):
                assert k == key and window.start_ms not in emitted, (spec, window)
                assert window.start_ms + size + grace <= now, (spec, window, now)
                emitted[window.start_ms] = value
        assert stream is not None
        due = {s: c for s, c in counts.items() if s + size + grace <= stream}
        assert emitted == due, spec
        layers.discard()


# A handle trusts the stream time it holds only while the layers' generation stays:
# after an abort (the open writes dropped) and after a wipe of the local copy under it
# (a restore: ``Stores`` says so, ``stores_changed``), it reads the store's stream time
# again, so a record is not taken for late against a stream time the store no longer
# has. Caught: the handle trusting its own stream time whatever the generation (the
# abort), and ``stores_changed`` not moving the generation (the wipe).
def test_a_handle_rereads_stream_time_the_store_no_longer_has(tmp_path: Path) -> None:
    local = LocalPartition(tmp_path, P, ["w"], Env())
    try:
        layers = Layers()
        h = WindowStore("w", eosflow.Tumbling(size_s=1), Store("w", P, BYTES, layers, local))
        layers.begin(adopted=False)
        h.advance(50_000)
        layers.discard()  # aborted: the stream time of 50 s was never committed
        layers.begin(adopted=False)
        h.advance(1_000)
        assert h.update(b"k", lambda n: n + 1, 0), "late against an aborted stream time"
        layers.discard()
        local.apply({"w": {TIME_KEY: struct.pack(">q", 90_000)}}, {})  # committed elsewhere
        fresh = WindowStore("w", eosflow.Tumbling(size_s=1), Store("w", P, BYTES, layers, local))
        layers.begin(adopted=False)
        fresh.advance(2_000)  # reads 90 s: late, and writes nothing
        assert not fresh.update(b"k", lambda n: n + 1, 0)
        local.wipe("w")  # the copy restored from nothing under the handle
        layers.stores_changed()  # as Stores does once a restored partition is ready
        fresh.advance(3_000)
        assert fresh.update(b"k", lambda n: n + 1, 0), "late against a wiped stream time"
    finally:
        local.close()
