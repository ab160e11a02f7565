"""``BatchState`` against the per-record path, in process: the same layers, a real RocksDB
local copy and the same ``EventTime``, one driven record by record (as ``Stores`` does
with a dead-letter topic), the other a batch at a time (``run_batch``). Sequences where
the two could part: a batch that fails and is taken back, a batch whose only record has
a bad ``timestamp()``, late records inside a batch. The comment above each test names the
mutation that made it fail."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import eosflow
from eosflow._processor import as_outputs
from eosflow._state import Seat, seated
from eosflow._state._batch import BatchState, run_batch
from eosflow._state._layers import Layers
from eosflow._state._local import Env, LocalPartition
from eosflow._state._store import BYTES, Store
from eosflow._state._time import EventTime

P = ("in", 0)
SPEC = eosflow.Tumbling(size_s=10)


def _add(old: int | None, n: int) -> int:
    return (old or 0) + n


def rec(offset: int, t_ms: int, value: bytes = b"v") -> eosflow.Record:
    return eosflow.Record("in", 0, offset, b"k", value, (), t_ms)


class Clicks(eosflow.Processor):
    """One count per window, per record or per batch; b"boom" fails its record (or
    batch), b"bad" its timestamp()."""

    windows: Any = {"clicks": SPEC}
    batches = 0

    def timestamp(self, record: eosflow.Record) -> int:
        if record.value == b"bad":
            raise ValueError("bad timestamp")
        return record.timestamp

    async def process(self, record: eosflow.Record) -> None:
        if record.value == b"boom":
            raise ValueError("boom")
        self.window("clicks").update(b"k", lambda n: n + 1, 0)

    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        self.batches += 1
        parts = Counter(start for _i, start in self.batch.windows("clicks"))
        for start, n in sorted(parts.items()):
            self.batch.merge("clicks", P, b"k", n, _add, start_ms=start)
        if any(r.value == b"boom" for r in records):
            raise ValueError("boom")
        return []

    async def closed(self, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
        return eosflow.Output("out", json.dumps([window.start_ms, value]), key=key)


class Run:
    """One input partition's windows, committed to RocksDB after each call."""

    def __init__(self, tmp: Path, processor: Clicks, dead_letters: bool = True) -> None:
        self.layers, self.proc = Layers(), processor
        self.local = LocalPartition(tmp, P, ["clicks"], Env())
        self.time = EventTime(self.backing, "dlq" if dead_letters else None, None)
        self.seat = Seat(processor, eosflow.Observer())
        self.seat.stores = self  # as Stores is: its window()
        self.process, _entered = self.time.bind(
            self.seat, processor.process, as_outputs, False, lambda partition: None
        )
        self.dead_letters = dead_letters
        self.current = P
        self.failures: list[str] = []

    def backing(self, name: str, partition: tuple[str, int]) -> Store[Any]:
        return Store(name, partition, BYTES, self.layers, self.local)

    def window(self, name: str) -> Any:
        return self.time.window(name, self.current)

    def failed(self, records: Sequence[eosflow.Record], exc: Exception) -> list[eosflow.Output]:
        self.failures.append(str(exc))
        if not self.dead_letters:
            raise RuntimeError(f"the error policy: {exc}")
        return [eosflow.Output("dlq", b"", key=r.key) for r in records]

    async def one_by_one(self, records: list[eosflow.Record]) -> list[str]:
        self.layers.begin(adopted=False)
        out: list[eosflow.Output] = []
        with seated(self.seat):
            for r in records:
                undo: list[Any] = []
                self.layers.undo = undo
                try:
                    out += as_outputs(await self.process(r))
                except Exception:
                    self.layers.revert(undo)
                finally:
                    self.layers.undo = None
        return self._commit(out)

    async def in_batch(self, records: list[eosflow.Record]) -> list[str]:
        self.layers.begin(adopted=False)
        state = BatchState(self.backing, self.time.batch_windows(), [])

        def step(state: BatchState, failed: Any) -> list[Any]:
            windows, late = self.time.window_stores, self.time.count_late
            return state.take(self.proc, records, windows, late, failed, self.layers)

        with seated(self.seat):
            out, _dead = await run_batch(
                self.seat, state, step, self.layers, as_outputs, self.failed, self.dead_letters
            )
        return self._commit(out)

    def _commit(self, out: list[eosflow.Output]) -> list[str]:
        sealed = self.layers.seal()
        self.local.apply({name: dict(w) for (name, _p), w in sealed.items()}, {})
        self.layers.committed()
        return [(o.value or b"").decode() for o in out if o.topic == "out"]


# Batches: [1 s]; [50 s, fails: taken back]; [a bad timestamp() alone]; [5 s]; [60 s].
# Record by record and batch by batch, the final of [0, 10) is 2, emitted once, at the
# end. Caught: the partitions of a batch registered before their records' timestamp()
# (the third batch closed [0, 10) from the handle's stale stream time: a final of 1,
# then another).
async def test_a_batch_gives_the_per_record_finals_across_a_failed_batch(tmp_path: Path) -> None:
    batches = [[rec(0, 1000)], [rec(1, 50_000, b"boom")], [rec(2, 0, b"bad")]]
    batches += [[rec(3, 5000)], [rec(4, 60_000)]]
    per_record = Run(tmp_path / "a", Clicks())
    batch = Run(tmp_path / "b", Clicks())
    expected = [await per_record.one_by_one(list(b)) for b in batches]
    got = [await batch.in_batch(list(b)) for b in batches]
    assert got == expected == [[], [], [], [], ["[0, 2]"]]


class Ghost(Clicks):
    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        self.batch.merge("clicks", P, b"k", 1, _add, start_ms=30_000)
        return []


# A merge goes only into a window one of the batch's records is in while open: not one
# that closed before the batch or that no record of it reached. (Which records a partial
# counted, merge cannot know: windows() lists each record's open windows.) Caught: the
# check as a range of starts up to the stream time (the merge into [30, 40) taken).
async def test_a_merge_into_a_window_no_record_is_in_while_open_is_refused(
    tmp_path: Path,
) -> None:
    run = Run(tmp_path, Ghost(), dead_letters=False)
    with pytest.raises(RuntimeError, match="none of the batch's records is in it while open"):
        await run.in_batch([rec(0, 1000), rec(1, 45_000), rec(2, 5000)])  # 5 s: late


# A bad timestamp() goes to the app's error policy (which without a dead-letter topic
# stops the app, naming the record), as on the per-record path; a batch whose every
# record was dead-lettered does not call process_batch. Caught: timestamp()'s error
# raised as it is; process_batch called with no record.
async def test_bad_timestamps_go_to_the_error_policy(tmp_path: Path) -> None:
    stops = Run(tmp_path / "a", Clicks(), dead_letters=False)
    with pytest.raises(RuntimeError, match="the error policy: bad timestamp"):
        await stops.in_batch([rec(0, 0, b"bad")])
    proc = Clicks()
    dead = Run(tmp_path / "b", proc)
    assert await dead.in_batch([rec(0, 0, b"bad"), rec(1, 0, b"bad")]) == []
    assert dead.failures == ["bad timestamp"] * 2 and proc.batches == 0
