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
            for lookup in LOOKUPS:
                for name in NAMES:
                    compiled = getattr(type(who), lookup)
                    python = PYTHON_PATH[lookup]
                    got = _outcome(lambda c=compiled, n=name, w=who: c(w, n))
                    want = _outcome(lambda p=python, n=name, w=who: p(w, n))
                    self.seen.append((lookup, name, who is self, got, want))


@contextlib.contextmanager
def bound(
    tmp_path: Path, processor: eosflow.Processor, members: tuple[eosflow.Processor, ...] = ()
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
    )
    specs = declared(processor)
    stores = Stores(state_settings(cfg), specs, lambda p: None, lambda e: None)
    stores._local[P] = local = LocalPartition(tmp_path, P, sorted(specs), Env())
    try:
        stores._held.add(P)
        stores._ready.add(P)
        seat = Seat(processor, eosflow.Observer(), members=members)
        process = stores.bind(seat, lambda r: [] if r is None else [r])
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

    def fails(*_: object) -> None:
        raise AssertionError("the Python path ran")

    finder = Finder()
    with bound(tmp_path, finder) as (_, seat, process):

        async def run() -> None:
            with seated(seat):
                await process(record(0))  # opens them
                assert bind_seat(Seat, CURRENT, dict.fromkeys(LOOKUPS, fails)) is not None
                try:
                    await process(record(1))
                finally:
                    bind_seat(Seat, CURRENT, PYTHON_PATH)

        asyncio.run(run())
    (_, t0, _, s0, w0), (_, t1, _, s1, w1) = finder.seen
    assert s0 is s1 and w0 is w1 and t0 is view and t1 is view


# A pipeline's stage reaches only what it declares, though the record's stores (``now``)
# hold every stage's: its calls go to the Python method, which says so. Caught: the
# compiled check widened to the seat's members (stage A got stage B's store).
def test_a_stage_asking_for_another_stages_store_is_refused_alike(tmp_path: Path) -> None:
    class StageA(eosflow.Processor):
        stores: Any = {"a": eosflow.JSON}

    class StageB(eosflow.Processor):
        stores: Any = {"b": eosflow.JSON}

    a, b = StageA(), StageB()
    outcomes: list[tuple[Any, Any]] = []

    class Runner(eosflow.Processor):  # what runs the stages: every stage's stores
        stores: Any = {"a": eosflow.JSON, "b": eosflow.JSON}

        async def process(self, record: eosflow.Record) -> None:
            for stage, name in ((a, "a"), (b, "b"), (a, "b"), (b, "a")):  # opened, then across
                got = _outcome(lambda s=stage, n=name: type(s).state(s, n))
                want = _outcome(lambda s=stage, n=name: PYTHON_PATH["state"](s, n))
                outcomes.append((got, want))

    with bound(tmp_path, Runner(), members=(a, b)) as (_, seat, process):

        async def run() -> None:
            with seated(seat):
                await process(record(0))

        asyncio.run(run())
    assert [got[0] for got, _ in outcomes] == ["found", "found", "raised", "raised"]
    for got, want in outcomes:
        assert _same(got, want), (got, want)
