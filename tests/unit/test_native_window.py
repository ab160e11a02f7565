"""A window's compiled ``advance`` and a tumbling window's compiled ``update``
(``eosflow._native``'s ``bind_window``) give what ``WindowStore``'s Python methods give,
over random runs of records -- their event times, updates, closes -- and the
transaction's moves. The comment above each test
names the mutations that made it fail."""

from __future__ import annotations

import pickle
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from differential import commit, outcome, transaction_move

import eosflow
from eosflow._native import bind_window
from eosflow._state._layers import Layers
from eosflow._state._local import Env, LocalPartition
from eosflow._state._store import Store
from eosflow._state._windows import PYTHON_PATH, WindowStore

P = ("in", 0)
SPECS: dict[str, Any] = {
    "json": eosflow.Tumbling(size_s=1),
    "graced": eosflow.Tumbling(size_s=1, grace_s=0.5),
    "bytes": eosflow.Tumbling(size_s=2, serde=eosflow.BYTES),
    "pickled": eosflow.Tumbling(size_s=1, serde=pickle),
    "hopping": eosflow.Hopping(size_s=2, advance_s=1),
}


class PythonWindow(WindowStore[Any]):
    """``WindowStore`` with its Python ``update`` and ``advance``: a subclass, so the
    compiled ones (which take only a ``WindowStore``) would hand it to these anyway."""

    __slots__ = ()
    update = PYTHON_PATH["update"]
    advance = PYTHON_PATH["advance"]


def _fail(_: Any) -> Any:
    raise ValueError("fn failed")


def _python_ran(*_: Any) -> Any:
    raise AssertionError("the Python path ran")


FNS: list[Callable[[Any], Any]] = [
    lambda v: v + 1,  # a count (a TypeError on what is not a number)
    lambda v: v + 1,
    lambda v: v + 1,
    lambda v: [v],  # not held: JSON gives it back as a list, and a list is mutable
    lambda v: (v, 1),
    lambda v: None,
    lambda v: 2.5,
    lambda v: "s",
    lambda v: b"raw",
    lambda v: True,
    lambda v: v,
    _fail,
]
KEYS: list[Any] = [b"a", b"b", b"k1", b"", "a", "\u00e9", bytearray(b"b"), 7]
INITIALS: list[Any] = [0, 0, 0, None, "x", 1.5, b"", [1]]


class World:
    """Layers over a local copy with a window of each spec, and the windows' class."""

    def __init__(self, path: Path, window_type: type[WindowStore[Any]]) -> None:
        self.local = LocalPartition(path, P, list(SPECS), Env())
        self.layers = Layers()
        self.windows = {
            # (the values' store is BYTES, as ``_declare`` makes it: the window's serde
            # is the window's own)
            name: window_type(name, spec, Store(name, P, eosflow.BYTES, self.layers, self.local))
            for name, spec in SPECS.items()
        }
        self.undo: Any = None

    def commit(self) -> None:
        commit(self.layers, self.local)


def _record(
    window: WindowStore[Any],
    t: int,
    key: Any,
    fn: Any,
    initial: Any,
    meanwhile: Callable[[], None] | None = None,
) -> Any:
    """A record as ``EventTime`` runs it for one window: its time, its update, then the
    windows it closed (listed and deleted). ``meanwhile``: what happens to the layers
    while its ``process`` awaits, between the two."""
    before = window.advance(t)
    if meanwhile is not None:
        meanwhile()
    got = outcome(lambda: window.update(key, fn, initial))
    finals = outcome(lambda: window.closing(before)) if window.closed != before else None
    return got, window.late, finals


def _step(world: World, choice: tuple[Any, ...]) -> Any:
    """One move of the run ``choice`` names (drawn once, applied to both worlds)."""
    op, name, t, key, fn, initial = choice
    window = world.windows[name]
    layers = world.layers
    if op == "record":
        return _record(window, t, key, fn, initial)
    if op == "record_restored":  # a restore ended while the record's process awaited
        return _record(window, t, key, fn, initial, layers.stores_changed)
    if op == "get":
        return outcome(lambda: window.get(key, t - t % 1000))
    if op == "fetch":
        return outcome(lambda: list(window.fetch(key, t - 3000, t)))
    if op == "restored":  # a partition restored under the handles: they read again
        layers.stores_changed()
        return None
    transaction_move(world, op, take_back=fn is _fail)  # (_fail: a record dead-lettered)
    return None


OPS = ["record"] * 40 + ["record_restored", "get", "fetch", "restored", "undo_start"]
OPS += ["undo_end"]
OPS += ["seal", "commit", "commit", "discard"]


HELD = ("time", "late", "closed", "_now", "_edge", "_time_held", "_at", "_values")


def _state(world: World) -> Any:
    layers = world.layers
    return (
        {k: dict(w) for k, w in layers.open.items()},
        {k: dict(w) for k, w in layers.sealed.items()},
        {name: list(world.local.items(name, None, None)) for name in SPECS},
        {n: [getattr(h, a) for a in HELD] for n, h in world.windows.items()},
        [h.name for h in layers.deferred],
    )


def _time(rng: random.Random, clock: list[int]) -> int:
    """Event times as streams have them: mostly a little ahead, sometimes behind (late
    or out of order), sometimes a jump past several windows, now and then negative."""
    r = rng.random()
    if r < 0.02 or (r < 0.3 and clock[0] < 3000):  # (near the epoch: not all late)
        return -rng.randrange(1, 5000)
    if r < 0.15:
        return max(clock[0] - rng.randrange(0, 4000), 0)
    clock[0] += rng.choice([0, 0, 7, 90, 300]) if r < 0.97 else rng.randrange(2000, 9000)
    return clock[0]


# Over random runs, every record's advance and update give the same (window, value) list
# or the same error in the same words, the same lateness and the same finals, and leave
# the same layers, local copy, deferred writers and handle (its times, closed window,
# values held) as the Python methods. Caught (each alone): the record's window not checked
# against the one the last update wrote (a value counted into the window before it); a
# closed window updated (a late record counted); a value held though its serde gives it
# back changed (a tuple JSON reads back as a list); the layers' generation not compared
# (a value held across a restore counted on); the deferred write not registered (the
# sealed transaction without the window's values); a negative time taken in C (C's
# remainder is not Python's); an undoable unit's update held, not written.
@pytest.mark.parametrize("seed", range(8))
def test_compiled_window_update_is_the_python_one(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    compiled = World(tmp_path / "c", WindowStore)
    python = World(tmp_path / "p", PythonWindow)
    for world in (compiled, python):
        world.layers.begin(adopted=False)
    clock = [rng.choice([0, 0, rng.randrange(0, 10_000)])]
    try:
        for i in range(3000):
            choice = (
                rng.choice(OPS),
                rng.choice(list(SPECS)) if rng.random() < 0.5 else "json",
                _time(rng, clock),
                rng.choice(KEYS),
                rng.choice(FNS),
                rng.choice(INITIALS),
            )
            got, want = _step(compiled, choice), _step(python, choice)
            assert got == want, (i, choice, got, want)
            assert _state(compiled) == _state(python), (i, choice)
    finally:
        compiled.local.close()
        python.local.close()


# The compiled path does the work: with the Python methods it falls back to made to fail
# (bound again for this test) and ``Store.raw`` counted, a value is held across records
# (no read), read once from the local copy after a commit, and one its serde gives back
# changed is serialized at once (read again at the next record). Caught: ``_compile``
# not called; every call handed to the Python method (the slot of ``_tumbling`` read as
# 0).
def test_the_compiled_path_holds_and_reads_as_the_python_one(tmp_path: Path) -> None:
    world = World(tmp_path, WindowStore)
    world.layers.begin(adopted=False)
    window = world.windows["json"]
    reads: list[bytes] = []
    raw = Store.raw

    def counting(store: Store[Any], key: Any) -> Any:
        reads.append(key)
        return raw(store, key)

    def update(t: int, key: bytes, fn: Callable[[Any], Any]) -> Any:
        window.advance(t)
        ((_, value),) = window.update(key, fn, 0)
        return value

    for name in PYTHON_PATH:
        assert getattr(WindowStore, name).__module__ == "eosflow._native._stores", name
    try:
        update(1_000, b"a", lambda v: v + 1)  # a new window: the Python method's prefix
        setattr(Store, "raw", counting)  # noqa: B010
        assert bind_window(WindowStore, dict.fromkeys(PYTHON_PATH, _python_ran)) is not None
        try:
            got = [update(1_000 + i, b"a", lambda v: v + 1) for i in range(3)]
            world.commit()  # written to the local copy; the values held went with the seal
            got.append(update(1_500, b"a", lambda v: v + 1))
            got.append(update(1_600, b"b", lambda v: (v, 1)))  # serialized at once
            got.append(update(1_700, b"b", lambda v: v))  # read back from the layers
        finally:
            setattr(Store, "raw", raw)  # noqa: B010
            bind_window(WindowStore, PYTHON_PATH)
        assert got == [2, 3, 4, 5, (0, 1), [0, 1]]
        assert reads.count(window._prefix + b"a") == 1  # once, after the commit
        assert reads.count(window._prefix + b"b") == 2  # a miss, then the serialized value
    finally:
        world.local.close()


def _both(tmp_path: Path, name: str, moves: Callable[[WindowStore[Any]], Any]) -> list[Any]:
    """``moves`` on window ``name`` of a world of compiled windows and one of Python
    ones, a transaction open; each world's answer, then what it sealed."""
    out = []
    for label, window_type in (("c", WindowStore), ("p", PythonWindow)):
        world = World(tmp_path / label, window_type)
        world.layers.begin(adopted=False)
        try:
            got = moves(world.windows[name])
            out.append((got, {k: dict(w) for k, w in world.layers.seal().items()}))
        finally:
            world.local.close()
    return out


# A negative event time just before the window the last update wrote: Python's
# remainder puts it in the window before, closed, so the record is late; C's would put
# it in window 0. Caught: a negative time taken in C (which the random runs reach in one seed
# of eight).
def test_a_negative_time_is_late_before_an_open_window_alike(tmp_path: Path) -> None:
    def moves(window: WindowStore[Any]) -> Any:
        window.advance(0)  # stream time 0: [-1 s, 0) has closed, [0, 1 s) is open
        first = window.update(b"k", lambda v: v + 1, 0)
        window.advance(-500)
        return first, window.update(b"k", lambda v: v + 1, 0), window.late

    (compiled, _), (python, _) = _both(tmp_path, "json", moves)
    assert compiled == python
    assert python[1:] == ([], True)


# An ``fn`` that reads its own window (which writes the values held out first) keeps
# its update, and an ``fn`` whose value the serde cannot write, caught by the caller,
# leaves the value held before. Caught: the held values' dict read before ``fn``
# (the update lost at the seal); the value dropped before it was serialized.
def test_an_fn_reading_its_window_or_failing_to_serialize_loses_nothing(tmp_path: Path) -> None:
    def moves(window: WindowStore[Any]) -> Any:
        window.advance(1_000)
        window.update(b"k", lambda v: v + 1, 0)  # 1, held
        window.advance(1_001)

        def reading(v: int) -> int:
            window.get(b"other", 1_000)  # writes the held values out
            return v + 1

        window.update(b"k", reading, 0)  # 2
        window.advance(1_002)
        try:
            window.update(b"k", lambda v: object(), 0)  # JSON cannot write it
        except TypeError:
            pass
        return window.get(b"k", 1_000)

    (compiled, sealed_c), (python, sealed_p) = _both(tmp_path, "json", moves)
    assert compiled == python == 2
    assert sealed_c == sealed_p


# ``late_at(t)`` says what ``update`` would say of a record at ``t``: late exactly when
# every window holding it has closed, for tumbling and hopping windows. (The windowed
# record's frameless path, ``EventTime._one``, skips the late count on its word.)
# Caught: ``late_at`` stepping by the window's size instead of its advance (hopping
# windows' late records taken for open ones).
@pytest.mark.parametrize(
    "spec",
    [
        eosflow.Tumbling(size_s=1),
        eosflow.Hopping(size_s=3, advance_s=2),
        eosflow.Hopping(size_s=2, advance_s=1, grace_s=0.5),
    ],
)
def test_late_at_is_what_update_says(tmp_path: Path, spec: Any) -> None:
    rng = random.Random(7)
    local = LocalPartition(tmp_path, P, ["w"], Env())
    layers = Layers()
    layers.begin(adopted=False)
    window = WindowStore("w", spec, Store("w", P, eosflow.BYTES, layers, local))
    clock, seen = 0, {True: 0, False: 0}
    try:
        for _ in range(3000):
            clock += rng.choice([0, 50, 400, 1_500])
            t = max(clock - rng.randrange(0, 6_000), 0) if rng.random() < 0.4 else clock
            window.advance(t)
            said = window.late_at(t)
            window.update(b"k", lambda v: v + 1, 0)
            assert said == window.late, (t, window.closed)
            seen[said] += 1
    finally:
        local.close()
    assert seen[True] > 100 and seen[False] > 100  # both answers reached
