"""A window's stream time, and a tumbling window's values, are held by its handle and
written once a transaction (a deferred write, ``Layers.defer``), not at every record:
these tests pin where they must still reach the store -- the sealed transaction, an
undoable unit's start, any other read or write of the store -- and when the handle must
read the store again -- writes dropped or taken back, a partition restored under it.
The comment above each test names the mutation that made it fail."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from engines import entered

import eosflow
from eosflow._state import Seat, Stores, declared, seated, state_settings
from eosflow._state._layers import Layers
from eosflow._state._local import Env, LocalPartition
from eosflow._state._store import BYTES, Store
from eosflow._state._windows import TIME_KEY, WindowStore

P = ("in", 0)
SECOND = eosflow.Tumbling(size_s=1)  # window [s, s + 1000) closes at stream time s + 1000


def _time(layer: dict[Any, Any]) -> int | None:
    raw = layer.get(("w", P), {}).get(TIME_KEY)
    return None if raw is None else int(struct.unpack(">q", raw)[0])


@dataclass
class _Window:
    layers: Layers
    handle: WindowStore[int]
    local: LocalPartition

    def counted(self, t: int) -> bool:
        """A record at ``t``: whether it went into a window (False: late)."""
        self.handle.advance(t)
        return bool(self.handle.update(b"k", lambda n: n + 1, 0))


@pytest.fixture
def w(tmp_path: Path) -> Iterator[_Window]:
    """A window handle over a real local copy, a transaction open."""
    local = LocalPartition(tmp_path, P, ["w"], Env())
    layers = Layers()
    layers.begin(adopted=False)
    yield _Window(layers, WindowStore("w", SECOND, Store("w", P, BYTES, layers, local)), local)
    local.close()


# Caught: the seal not making the deferred writes (the sealed transaction, and so the
# changelog and the local copy, without the stream time its records reached).
def test_the_sealed_transaction_holds_the_stream_time_its_records_reached(w: _Window) -> None:
    for t in (1_000, 5_000, 3_000):  # out of order: the largest is the stream time
        w.handle.advance(t)
    assert _time(w.layers.open) is None, "written at a record, not deferred"
    assert _time(w.layers.seal()) == 5_000
    w.handle.advance(7_000)  # work done ahead of the next transaction, then adopted
    w.layers.begin(adopted=True)
    assert _time(w.layers.seal()) == 7_000


# Caught: ``start_undo`` not making the deferred writes first (the record taken back
# took the stream time of the records before it too: a record at 8 s counted into a
# window closed at 9 s < 10 s), and ``revert`` not moving the generation (the handle kept
# the taken-back 50 s: the record at 12 s found its window closed).
def test_a_unit_taken_back_takes_back_its_own_stream_time_only(w: _Window) -> None:
    w.handle.advance(10_000)  # deferred
    undo = w.layers.start_undo()  # a record that may be dead-lettered
    w.handle.advance(50_000)
    w.layers.revert(undo)  # it was
    w.layers.undo = None
    assert not w.counted(8_000), "counted into a closed window"
    assert w.counted(12_000), "late against a taken-back stream time"
    assert _time(w.layers.seal()) == 12_000


# Caught: a handle deferring inside an undoable unit (a batch's late record taken back
# moved the generation, and the handle read back a stream time without the batch's
# records before it: the record at 15 s counted into a window closed at 16 s < 20 s).
def test_part_of_a_unit_taken_back_leaves_the_stream_time_before_it(w: _Window) -> None:
    undo = w.layers.start_undo()  # a batch
    w.handle.advance(10_000)
    w.handle.advance(20_000)
    mark = len(undo)
    assert not w.counted(5_000)  # a late record, taken back alone
    w.layers.revert(undo[mark:])
    del undo[mark:]
    assert not w.counted(15_000), "counted into a closed window"
    w.layers.undo = None
    assert _time(w.layers.seal()) == 20_000


# A revert with a deferred write pending would lose it (the generation moves and the
# handle reads back the store): nothing defers inside a unit, and ``revert`` refuses
# rather than lose one. Caught: the refusal taken out (the record at 5 s counted into a
# window closed at 6 s < 10 s).
def test_a_revert_never_drops_a_deferred_stream_time(w: _Window) -> None:
    w.handle.advance(10_000)  # deferred, outside any unit
    with pytest.raises(RuntimeError, match="deferred inside an undoable unit"):
        w.layers.revert([])
    assert not w.counted(5_000)


# Caught: ``begin`` of work not adopted, and ``discard``, each not moving the generation
# (the handle kept 50 s from dropped work: the record at 12 s found its window closed).
def test_dropped_work_takes_its_stream_time_with_it(w: _Window) -> None:
    w.handle.advance(10_000)
    w.local.apply({"w": dict(w.layers.seal()[("w", P)])}, {})  # committed
    w.layers.committed()
    w.handle.advance(50_000)  # work done ahead, then not adopted
    w.layers.begin(adopted=False)
    assert w.counted(12_000), "late against work not adopted"
    w.handle.advance(50_000)  # then aborted
    w.layers.discard()
    assert w.counted(13_000), "late against an aborted transaction"


# Caught: ``stores_changed`` moving the generation without making the deferred writes
# first (the handle read back a stream time without its own records of the transaction:
# the record at 5 s counted into a window closed at 6 s < 10 s).
def test_a_restore_elsewhere_keeps_what_a_handle_deferred(w: _Window) -> None:
    w.handle.advance(10_000)
    w.layers.stores_changed()  # another partition restored
    assert not w.counted(5_000), "counted into a closed window"


def _values(layer: dict[Any, Any]) -> dict[bytes, bytes | None]:
    """A layer's data keys (key part only) and serialized values."""
    return {k[9:]: v for k, v in layer.get(("w", P), {}).items() if k.startswith(b"w")}


# A tumbling window's update holds each key's value, serialized once a transaction.
# Caught: the seal not writing the values held (nothing sealed); a key first updated
# in a transaction whose records do not move the stream time never registered (its
# value missing from the second seal).
def test_the_sealed_transaction_holds_each_keys_last_value(w: _Window) -> None:
    for key in (b"a", b"a", b"b", b"a"):
        w.handle.advance(5_000)
        w.handle.update(key, lambda n: n + 1, 0)
    assert _values(w.layers.open) == {}, "serialized at every record, not held"
    assert _values(w.layers.seal()) == {b"a": b"3", b"b": b"1"}
    w.local.apply({"w": dict(w.layers.sealed[("w", P)])}, {})
    w.layers.committed()
    w.layers.begin(adopted=True)
    w.handle.advance(5_000)  # stream time stays: only the value registers
    assert w.handle.update(b"b", lambda n: n + 1, 0)[0][1] == 2
    assert _values(w.layers.seal()) == {b"b": b"2"}


# Every other read or write of the store first writes the values held. Caught: get,
# put, fetch and closing each without it (get and fetch answered the store's older
# value, put was overwritten by the held one at the seal, closing emitted a count
# without the transaction's records).
def test_reads_and_writes_of_the_store_see_the_values_held(w: _Window) -> None:
    h = w.handle
    for _ in range(2):
        h.advance(1_000)
        h.update(b"k", lambda n: n + 1, 0)
    assert h.get(b"k", 1_000) == 2
    h.update(b"k", lambda n: n + 1, 0)
    assert [v for _w, v in h.fetch(b"k", 0, 5_000)] == [3]
    h.update(b"k", lambda n: n + 1, 0)
    h.put(b"k", 1_000, 10)
    h.update(b"k", lambda n: n + 1, 0)
    h.put(b"j", 1_000, 7)
    assert _values(w.layers.open) == {b"j": b"7", b"k": b"11"}
    h.update(b"k", lambda n: n + 1, 0)  # held again
    before = h.advance(2_500)  # [1000, 2000) closes
    assert [(win.start_ms, k, v) for win, k, v in h.closing(before)] == [
        (1_000, b"j", 7),
        (1_000, b"k", 12),
    ]


# Caught: a handle keeping the values held across writes dropped (an abort, work ahead
# not adopted): the next update counted on a value no committed record made.
def test_dropped_work_takes_its_values_with_it(w: _Window) -> None:
    w.handle.advance(1_000)
    w.handle.update(b"k", lambda n: n + 1, 0)
    w.layers.discard()
    w.layers.begin(adopted=False)
    w.handle.advance(1_000)
    assert w.handle.update(b"k", lambda n: n + 1, 0)[0][1] == 1
    w.layers.begin(adopted=False)  # work ahead, not adopted
    w.handle.advance(1_000)
    assert w.handle.update(b"k", lambda n: n + 1, 0)[0][1] == 1


# Only values the serde gives back as they are (JSON: numbers, strings, booleans, null)
# are held; others are serialized at once, as at every record before. So what a later
# update reads never depends on where a seal fell. Caught (helper-19's review): a dict
# held (JSON turns its int key into a string: the final was {"7": 3} without a seal
# between the updates, {"7": 2} with one, {"7": 1} when serialized at every record).
def test_values_the_serde_would_change_are_not_held(tmp_path: Path) -> None:
    def bump(d: dict[Any, int]) -> dict[Any, int]:
        return {**d, 7: d.get(7, 0) + 1}

    finals = []
    for run, seal_between in enumerate((False, True)):
        local = LocalPartition(tmp_path / str(run), P, ["w"], Env())
        try:
            layers = Layers()
            h = WindowStore("w", SECOND, Store("w", P, BYTES, layers, local))
            layers.begin(adopted=False)
            h.advance(1_000)
            h.update(b"k", bump, {})
            if seal_between:
                local.apply({"w": dict(layers.seal()[("w", P)])}, {})
                layers.committed()
                layers.begin(adopted=True)
            for _ in range(2):
                h.advance(1_000)
                h.update(b"k", bump, {})
            before = h.advance(2_500)
            finals.append([value for _w, _k, value in h.closing(before)])
        finally:
            local.close()
    assert finals == [[{"7": 1}], [{"7": 1}]]


# The layers may move while a record's ``process`` awaits: a restore of another
# partition ends (its deferred writes made, the generation moved), or the transaction
# before aborts (the writes dropped). Caught (helper-19's review): an update held after
# the restore's move dropped at the next record (the final counted 2 of 3); values held
# before an abort written back by a later read (get answered the dropped count).
def test_the_layers_moving_while_a_record_is_in_process(w: _Window) -> None:
    h = w.handle
    h.advance(1_000)
    h.update(b"k", lambda n: n + 1, 0)
    h.advance(1_100)
    w.layers.stores_changed()  # while the record awaits, before its update
    h.update(b"k", lambda n: n + 1, 0)
    assert w.counted(1_200)
    assert _values(w.layers.seal()) == {b"k": b"3"}
    w.layers.begin(adopted=False)
    h.advance(1_300)
    h.update(b"j", lambda n: n + 1, 0)
    w.layers.discard()  # while the record awaits, after its update
    assert h.get(b"j", 1_000) is None, "a dropped value written back"
    assert _values(w.layers.seal()) == {}


# An undoable unit starts with the values held written; inside, update writes at once.
# Caught: ``start_undo`` without them (the unit's update started from nothing, and the
# revert took the key's value before the unit with it).
def test_a_unit_taken_back_keeps_the_values_before_it(w: _Window) -> None:
    w.handle.advance(1_000)
    w.handle.update(b"k", lambda n: n + 1, 0)
    undo = w.layers.start_undo()
    assert w.handle.update(b"k", lambda n: n + 1, 0)[0][1] == 2
    w.layers.revert(undo)
    w.layers.undo = None
    assert _values(w.layers.seal()) == {b"k": b"1"}


class _Count(eosflow.Processor):
    windows = {"w": SECOND}

    async def process(self, record: eosflow.Record) -> None:
        self.window("w").update(record.key or b"", lambda n: n + 1, 0)


# Caught: ``Stores`` not telling the layers that a restore changed the local copy under
# live handles (the handle kept 90 s from before the wipe: the record at 3 s was late).
def test_a_partition_restored_under_its_handles_is_read_again(tmp_path: Path) -> None:
    cfg = eosflow.EosConfig(
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        input_topics=("in",),
        transactional_id="t",
        state_dir=str(tmp_path),
    )
    processor = _Count()
    late: list[int] = []
    stores = Stores(
        state_settings(cfg),
        declared(processor),
        lambda p: None,
        lambda e: None,
        on_late=lambda w, n: late.append(n),
    )
    stores._local[P] = local = LocalPartition(tmp_path, P, ["w"], Env())
    try:
        stores._held.add(P)
        stores._ready.add(P)
        local.apply({"w": {TIME_KEY: struct.pack(">q", 90_000)}}, {})  # committed before
        seat = Seat(processor, eosflow.Observer())
        process = entered(stores, stores.bind(seat, lambda r: [] if r is None else [r]))

        def record(t: int) -> eosflow.Record:
            return eosflow.Record("in", 0, t, b"k", b"v", (), t)

        stores.begin(adopted=False)
        asyncio.run(seated_run(seat, process(record(2_000))))  # late against 90 s
        local.wipe("w")  # restored again, from a changelog with nothing
        stores._ready.discard(P)
        stores._restored(P)
        asyncio.run(seated_run(seat, process(record(3_000))))
        stores.seal()
        stores.committed()
        assert late == [1], "the record after the restore was late against the old time"
    finally:
        local.close()


async def seated_run(seat: Seat, step: Awaitable[Any]) -> Any:
    """``step`` with ``seat`` current, as inside ``EosApp.run``."""
    with seated(seat):
        return await step
