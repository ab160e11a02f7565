"""``Processor.state``, ``window`` and ``table`` compiled (``eosflow._native``'s
``bind_seat``) give what the Python methods give: inside ``process`` and outside it,
for the processor the app runs and for another, for names declared and not, and names
that are not a str. A real ``Stores`` over a RocksDB local copy, bound as the engine
binds it. The comment above each test names the mutations that made it fail."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from engines import entered

import eosflow
from eosflow._native import bind_seat
from eosflow._processor import PYTHON_PATH
from eosflow._state import CURRENT, Seat, Stores, declared, seated, state_settings
from eosflow._state._local import Env, LocalPartition

P = ("in", 0)
NAMES: list[Any] = ["s", "w", "t", "nope", "", 7, b"s", None, ("s",)]
LOOKUPS = ("state", "window", "table")


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return ("found", call())  # a handle: compared by identity below
    except Exception as exc:  # the same error, same words
        return ("raised", type(exc), str(exc))


def _same(got: Any, want: Any) -> bool:
    if got[0] == "found" and want[0] == "found":
        return bool(got[1] is want[1])
    return bool(got == want)


class Probe(eosflow.Processor):
    """Declares a store and a window; each record looks every name up both ways, as
    itself and as ``other`` (a processor the app does not run)."""

    stores: Any = {"s": eosflow.JSON}
    windows: Any = {"w": eosflow.Tumbling(size_s=10)}

    def __init__(self) -> None:
        super().__init__()
        self.other: eosflow.Processor | None = None
        self.seen: list[tuple[str, Any, bool, Any, Any]] = []

    async def process(self, record: eosflow.Record) -> None:
        self.look()

    def look(self) -> None:
        for who in (self, self.other):
            assert who is not None
            for lookup, name, got, want in both_ways(who, NAMES):
                self.seen.append((lookup, name, who is self, got, want))


def both_ways(who: eosflow.Processor, names: list[Any]) -> Iterator[tuple[str, Any, Any, Any]]:
    """Each lookup of each name by ``who``, compiled and in Python: (lookup, name, what
    the compiled method gave, what the Python one gave)."""
    for lookup in LOOKUPS:
        for name in names:
            compiled, python = getattr(type(who), lookup), PYTHON_PATH[lookup]
            got = _outcome(lambda c=compiled, n=name: c(who, n))
            yield lookup, name, got, _outcome(lambda p=python, n=name: p(who, n))


@contextlib.contextmanager
def bound(
    tmp_path: Path,
    processor: eosflow.Processor,
    members: tuple[eosflow.Processor, ...] = (),
    dead_letter_topic: str | None = None,
) -> Iterator[tuple[Stores, Seat, Callable[[eosflow.Record], Any]]]:
    """A real ``Stores`` of ``processor``'s declarations over a RocksDB local copy of
    partition ``P``, its seat, and ``process`` bound as the engine binds it, a
    transaction open."""
    cfg = eosflow.EosConfig(
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        input_topics=("in",),
        transactional_id="t",
        state_dir=str(tmp_path),
        dead_letter_topic=dead_letter_topic,
    )
    specs = declared(processor)
    stores = Stores(state_settings(cfg), specs, lambda p: None, lambda e: None)
    stores._local[P] = local = LocalPartition(tmp_path, P, sorted(specs), Env())
    try:
        stores._held.add(P)
        stores._ready.add(P)
        seat = Seat(processor, eosflow.Observer(), members=members)
        process = entered(stores, stores.bind(seat, lambda r: [] if r is None else [r]))
        stores.begin(adopted=False)
        yield stores, seat, process
    finally:
        local.close()


def record(offset: int) -> eosflow.Record:
    return eosflow.Record("in", 0, offset, b"k", b"v", (), 1_000)


# The compiled lookups are the ones in use. Caught: ``_compile`` not called.
def test_the_compiled_lookups_are_in_use() -> None:
    for lookup in LOOKUPS:
        assert getattr(eosflow.Processor, lookup).__module__ == "eosflow._native._stores"


# Inside process, for the processor run and for another, and outside process: every
# name found as the same handle, or refused with the same error in the same words.
# Caught: the processor's check dropped (another processor got the run one's store);
# a name not found answered None instead of the Python path's KeyError; the table
# looked up in the windows.
def test_compiled_lookups_are_the_python_ones(tmp_path: Path) -> None:
    probe = Probe()
    probe.other = Probe()
    with bound(tmp_path, probe) as (stores, seat, process):

        async def run() -> None:
            with seated(seat):
                for offset in range(3):  # the first opens the handles, the rest find them
                    await process(record(offset))
                stores.idle()
                probe.look()  # seated, no record in process

        asyncio.run(run())
        probe.look()  # no seat at all
    assert probe.seen
    for lookup, name, own, got, want in probe.seen:
        assert _same(got, want), (lookup, name, own, got, want)
    found = {(lookup, name) for lookup, name, own, got, _ in probe.seen if got[0] == "found"}
    assert {("state", "s"), ("window", "w")} <= found  # the fast path's answers


async def second_on_the_compiled_path(seat: Seat, process: Callable[[Any], Any]) -> None:
    """Two records in ``seat``: the first opens the handles; the second runs with the
    Python lookups the compiled ones fall back to made to fail (bound again here)."""

    def fails(*_: object) -> None:
        raise AssertionError("the Python path ran")

    with seated(seat):
        await process(record(0))
        assert bind_seat(Seat, CURRENT, dict.fromkeys(LOOKUPS, fails)) is not None
        try:
            await process(record(1))
        finally:
            bind_seat(Seat, CURRENT, PYTHON_PATH)


# The compiled path answers a found handle itself: with the Python methods it falls
# back to made to fail (bound again for this test), state(), window() and table()
# inside process still find theirs. Caught: the seat's class check never passing
# (every call handed to the Python methods, which the test above cannot tell apart);
# the table looked up in the windows.
def test_a_found_handle_takes_the_compiled_path(tmp_path: Path) -> None:
    view = object()  # what a table's view would be: the seat holds it, by name

    class Finder(Probe):
        async def process(self, record: eosflow.Record) -> None:
            seat.tables = {"t": view}  # as the join's wrapper sets it (no table declared)
            self.seen.append(("", self.table("t"), True, self.state("s"), self.window("w")))

    finder = Finder()
    with bound(tmp_path, finder) as (_, seat, process):
        asyncio.run(second_on_the_compiled_path(seat, process))
    (_, t0, _, s0, w0), (_, t1, _, s1, w1) = finder.seen
    assert s0 is s1 and w0 is w1 and t0 is view and t1 is view


class StageA(eosflow.Processor):
    stores: Any = {"a": eosflow.JSON}
    windows: Any = {"wa": eosflow.Tumbling(size_s=10)}


class StageB(eosflow.Processor):
    stores: Any = {"b": eosflow.JSON}
    windows: Any = {"wb": eosflow.Tumbling(size_s=10)}


class Runner(eosflow.Processor):
    """What runs a pipeline's stages (``_stages.Staged``): every stage's stores and
    windows, the stages the seat's members; ``process`` calls ``look``."""

    stores: Any = {"a": eosflow.JSON, "b": eosflow.JSON}
    windows: Any = {"wa": eosflow.Tumbling(size_s=10), "wb": eosflow.Tumbling(size_s=10)}

    def __init__(self, look: Callable[[], None]) -> None:
        super().__init__()
        self.look = look

    async def process(self, record: eosflow.Record) -> None:
        self.look()


STAGE_NAMES: list[Any] = ["a", "b", "wa", "wb", "nope", 7, None]


# A pipeline's stage reaches what it declares, though the record's stores (``now``) and
# windows hold every stage's: each stage's lookups, of its own names and the other's,
# give the Python method's handle or its error in its words. Caught: the compiled check
# widened to the seat's members (stage A got stage B's store); the stage's names not
# checked at all (``reach`` read, the name not looked up in it).
def test_a_stage_finds_its_own_and_is_refused_the_others_alike(tmp_path: Path) -> None:
    a, b = StageA(), StageB()
    outcomes: list[tuple[str, Any, Any, Any, Any]] = []

    def look() -> None:
        for stage in (a, b):
            for lookup, name, got, want in both_ways(stage, STAGE_NAMES):
                outcomes.append((type(stage).__name__, lookup, name, got, want))

    with bound(tmp_path, Runner(look), members=(a, b)) as (_, seat, process):

        async def run() -> None:
            with seated(seat):
                for offset in range(2):  # the first opens the handles, the second finds them
                    await process(record(offset))

        asyncio.run(run())
    for stage, lookup, name, got, want in outcomes:
        assert _same(got, want), (stage, lookup, name, got, want)
    found = {(stage, lookup, name) for stage, lookup, name, got, _ in outcomes if got[0] == "found"}
    assert found == {
        ("StageA", "state", "a"),
        ("StageA", "window", "wa"),
        ("StageB", "state", "b"),
        ("StageB", "window", "wb"),
    }


# A stage's own names take the compiled path: with the Python methods made to fail, each
# stage still finds its store and window, and a table the seat holds by a name it
# declares. Caught: the stage's lookups handed to the Python methods (``reach`` never
# read).
def test_a_stage_finds_its_own_on_the_compiled_path(tmp_path: Path) -> None:
    a, b = StageA(), StageB()
    view = object()
    seen: list[Any] = []

    class Joiner(StageA):
        tables: Any = {"t": eosflow.Table("rows")}

    j = Joiner()

    def look() -> None:
        seat.tables = {"t": view}  # as the join's wrapper sets it
        seen.append((a.state("a"), a.window("wa"), b.state("b"), b.window("wb"), j.table("t")))

    with bound(tmp_path, Runner(look), members=(a, b, j)) as (_, seat, process):
        asyncio.run(second_on_the_compiled_path(seat, process))
    first, second = seen
    assert all(x is y for x, y in zip(first, second, strict=True))
    assert second[-1] is view


# A windowed record that closes no window and cannot be late runs without a frame of its
# own around ``process`` (``EventTime._one``, ``_one_per_run``): its window stays in the
# seat until the engine says no record is in process (``Stores.idle``) -- or, with a
# dead-letter topic, until the wrapper that takes back a failed record's writes ends --
# and window() then finds none, compiled or not. Caught: idle leaving the seat's windows
# in place; the dead-letter wrapper leaving them (window() answered after process).
@pytest.mark.parametrize("dead_letter_topic", [None, "dlq"])
def test_a_window_is_not_found_once_idle(tmp_path: Path, dead_letter_topic: str | None) -> None:
    class Counter(Probe):
        async def process(self, record: eosflow.Record) -> None:
            self.window("w").update(b"k", lambda n: n + 1, 0)

    counter = Counter()
    with bound(tmp_path, counter, dead_letter_topic=dead_letter_topic) as (stores, seat, process):

        async def run() -> list[Any]:
            with seated(seat):
                await process(record(0))
                await process(record(1))  # the window [0, 10 s) open: the frameless path
                if dead_letter_topic is None:
                    stores.idle()
                compiled = _outcome(lambda: counter.window("w"))
                return [compiled, _outcome(lambda: PYTHON_PATH["window"](counter, "w"))]

        got = asyncio.run(run())
    for outcome in got:
        assert outcome[0] == "raised" and outcome[1] is RuntimeError, outcome
