"""A pipeline's stage runs without a frame of eosflow's around its ``process``
(``Staged.process`` hands the stage's coroutine on) and the engine routes what it
returns (``Seat.route``, ``Staged.route``): each ``Regroup`` an ``Output`` to its stage's
repartition topic, on every path that checks a result -- the per-record loop, the
dead-letter wrapper, a window's finals -- and a lazy result read while the record is in
process, as it was inside the stage's frame. A real ``Engine`` and ``Stores`` over
RocksDB local copies, fed records by ``Engine._process``; no broker. The comment above
each test names the mutations that made it fail."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import engines
from engines import run

import eosflow


class ByProduct(eosflow.Processor):
    async def process(self, record: eosflow.Record) -> eosflow.Regroup:
        assert record.value is not None
        return eosflow.Regroup(key=record.value.split(b"|")[0], value=record.value)


class Lazily(eosflow.Processor):
    """Counts per key, its outputs a generator that reads the store as it is read."""

    stores: Any = {"n": eosflow.JSON}

    async def process(self, record: eosflow.Record) -> Iterator[eosflow.Regroup]:
        if record.value == b"suspend":
            await asyncio.sleep(0)  # the engine finishes it (``resumed``), not the loop

        def regroups() -> Iterator[eosflow.Regroup]:
            counts = self.state("n")  # no store outside process: read in process or fail
            counts.put(record.key, counts.get(record.key, 0) + 1)
            yield eosflow.Regroup(key=b"all", value=b"%d" % counts.get(record.key))

        return regroups()


class Emit(eosflow.Processor):
    async def process(self, record: eosflow.Record) -> eosflow.Output:
        return eosflow.Output("out", record.value, key=record.key)


class Windowed(eosflow.Processor):
    """A one-second window per key; every record regroups, each final is an output."""

    windows: Any = {"w": eosflow.Tumbling(size_s=1)}

    async def process(self, record: eosflow.Record) -> eosflow.Regroup:
        self.window("w").update(record.key, lambda n: n + 1, 0)
        return eosflow.Regroup(key=b"w", value=record.value)

    async def closed(self, key: bytes, window: eosflow.Window, value: Any) -> eosflow.Output:
        return eosflow.Output("finals", b"%d" % value, key=key)


def engine_of(tmp_path: Path, stages: dict[str, eosflow.Stage], **cfg: Any) -> tuple[Any, Any]:
    """The engine of a pipeline of ``stages`` (sources ``orders``)."""

    class App(eosflow.Pipeline):
        pass

    App.stages = stages
    return engines.engine_of(tmp_path, App(), **cfg)


def rec(topic: str, offset: int, key: bytes, value: bytes, ts: int = 1_000) -> eosflow.Record:
    return eosflow.Record(topic, 0, offset, key, value, (), ts)


# Records of three topics interleaved: the orders (one stage, regrouping), the first
# repartition topic (one stage, regrouping again) and the second (a branch: two stages
# read it). Each Regroup goes to its own stage's topic with its record's time; the
# branch's outputs pass as they are. Caught: route naming the stage of the wrong topic
# (``_stage_of`` by the first stage); the record's time not carried.
def test_each_regroup_goes_to_its_own_stages_topic(tmp_path: Path) -> None:
    app, engine = engine_of(
        tmp_path,
        {
            "a": eosflow.Stage(ByProduct(), inputs=("orders",)),
            "b": eosflow.Stage(ByProduct(), inputs=("a",)),
            "c": eosflow.Stage(Emit(), inputs=("b",)),
            "d": eosflow.Stage(Emit(), inputs=("b",)),
        },
    )
    work = run(
        app,
        engine,
        [
            rec("orders", 0, b"c1", b"p1|x", ts=5),
            rec("g--a--repartition", 0, b"p1", b"q|y", ts=6),
            rec("g--b--repartition", 0, b"q", b"z", ts=7),
            rec("orders", 1, b"c2", b"p2|x", ts=8),
        ],
    )
    got = [(o.topic, o.key, o.value, o.timestamp) for o in work.outputs]
    assert got == [
        ("g--a--repartition", b"p1", b"p1|x", 5),
        ("g--b--repartition", b"q", b"q|y", 6),
        ("out", b"q", b"z", None),  # the branch: c's output, then d's
        ("out", b"q", b"z", None),
        ("g--a--repartition", b"p2", b"p2|x", 8),
    ]
    assert work.offsets == {
        ("orders", 0): 2,
        ("g--a--repartition", 0): 1,
        ("g--b--repartition", 0): 1,
    }


# A stage's lazy result -- a generator reading its store -- is read while its record is
# in process, as it was inside the stage's frame: routed before the engine says no
# record is in process -- by the compiled loop, and by the engine for a record whose
# coroutine suspended. Caught, each: the loop's route removed (``_drive.pyx``), the
# engine's after a suspension removed (the generator read after ``idle``: no store
# open, the app stopped).
def test_a_lazy_result_is_read_in_process(tmp_path: Path) -> None:
    app, engine = engine_of(
        tmp_path,
        {
            "a": eosflow.Stage(Lazily(), inputs=("orders",)),
            "b": eosflow.Stage(Emit(), inputs=("a",)),
        },
    )
    values = [b"v", b"suspend", b"v", b"suspend"]
    work = run(app, engine, [rec("orders", i, b"c%d" % (i % 2), values[i]) for i in range(4)])
    assert [(o.topic, o.value) for o in work.outputs] == [
        ("g--a--repartition", v) for v in (b"1", b"1", b"2", b"2")
    ]


# With a dead-letter topic each record runs in a wrapper that checks its result itself
# (taking back the writes of one that fails): the stage's Regroup is routed there too,
# not dead-lettered. Caught: the engine's check left without routing (``_check`` the
# plain one: every record a dead letter, "returned Regroup").
def test_a_regroup_is_routed_under_a_dead_letter_topic(tmp_path: Path) -> None:
    app, engine = engine_of(
        tmp_path,
        {
            "a": eosflow.Stage(Lazily(), inputs=("orders",)),
            "b": eosflow.Stage(Emit(), inputs=("a",)),
        },
        dead_letter_topic="dlq",
    )
    work = run(app, engine, [rec("orders", i, b"c", b"v") for i in range(3)])
    assert work.dead_lettered == 0
    assert [(o.topic, o.value) for o in work.outputs] == [
        ("g--a--repartition", b"%d" % n) for n in (1, 2, 3)
    ]


# A record that closes a window has its result checked with the window's finals (the
# windowed wrapper's full path): its Regroup is routed there too, the finals after it.
# Caught: the engine's check left without routing (the closing record's Regroup a
# TypeError: the app stopped).
def test_a_regroup_is_routed_with_a_windows_finals(tmp_path: Path) -> None:
    app, engine = engine_of(
        tmp_path,
        {
            "a": eosflow.Stage(Windowed(), inputs=("orders",)),
            "b": eosflow.Stage(Emit(), inputs=("a",)),
        },
    )
    work = run(
        app,
        engine,
        [
            rec("orders", 0, b"k", b"v0", ts=100),
            rec("orders", 1, b"k", b"v1", ts=200),
            rec("orders", 2, b"k", b"v2", ts=1_500),
        ],
    )
    got = [(o.topic, o.key, o.value, o.timestamp) for o in work.outputs]
    assert got == [
        ("g--a--repartition", b"w", b"v0", 100),
        ("g--a--repartition", b"w", b"v1", 200),
        ("g--a--repartition", b"w", b"v2", 1_500),
        ("finals", b"k", b"2", None),
    ]
