"""``eosflow/_native``'s ``drive``, ``mark_runs`` and ``resumed``: the engine's per-record
loop compiled (``_drive``) gives what its Python reference (``_drive_py``) gives over
random records and processors -- every return (where, why, with what), every output --
and a coroutine ``drive`` started and ``resumed`` finishes is awaited as ``await`` would
(what the loop sends, throws or closes reaches it). The comment above each test names
the mutations that made it fail."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

import pytest

from eosflow import Output, Record, _native
from eosflow._native import _drive_py
from eosflow._native._drive_py import AWAIT, END, RAISED, RESULT, STOP, UNSTARTED, YIELD

INF = float("inf")


# The compiled loop is the one the engine runs. Caught: setup.py without ``_drive``
# (the reference in use).
def test_the_compiled_loop_is_in_use() -> None:
    assert _native.COMPILED
    for name in ("drive", "mark_runs"):
        assert getattr(_native, name).__module__ == "eosflow._native._drive", name


class Later:
    """An awaitable that is not a coroutine: ``drive`` hands it back unstarted."""

    def __init__(self, value: object) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, object]:
        yield from asyncio.sleep(0).__await__()
        return self.value


def records(rng: random.Random, n: int) -> list[Any]:
    """Runs of records of a few partitions of two topics, offsets rising per partition;
    now and then an object that is not a ``Record`` (read through its attributes)."""
    out: list[Any] = []
    next_offset: dict[tuple[str, int], int] = {}
    while len(out) < n:
        topic, part = rng.choice(["a", "b"]), rng.choice([0, 1, 2, 300, 301])
        for _ in range(rng.randrange(1, 6)):
            off = next_offset.get((topic, part), rng.randrange(0, 5))
            next_offset[(topic, part)] = off + rng.randrange(1, 3)
            r = Record(topic, part, off, b"k%d" % off, b"v%d" % off, (), 1_000 + off)
            if rng.random() < 0.05:
                r = _Lookalike(r)  # type: ignore[assignment]
            out.append(r)
    return out[:n]


class _Lookalike:
    def __init__(self, r: Record) -> None:
        self.topic, self.partition, self.offset = r.topic, r.partition, r.offset
        self.key, self.value = r.key, r.value


def processor(kinds: list[str]) -> Callable[[Any], Awaitable[object]]:
    """What each record's ``process`` does, by its offset's kind; deterministic."""

    def process(r: Any) -> Awaitable[object]:
        kind = kinds[r.offset % len(kinds)]
        if kind == "sync-raise":  # the call itself raises, before any coroutine
            raise KeyError(f"sync {r.offset}")
        if kind == "later":
            return Later(Output("t", r.value, key=r.key))
        return body(r, kind)

    async def body(r: Any, kind: str) -> object:
        if kind == "bytes":
            return Output("t", r.value, key=r.key)
        if kind == "keyless":
            return Output("t", None)
        if kind == "none":
            return None
        if kind == "str-value":
            return Output("t", "text", key=r.key)
        if kind == "str-key":
            return Output("t", b"v", key="k")
        if kind == "list":
            return [Output("t", r.value)]
        if kind == "marker":  # the route turns it into an Output
            return ("marker", r.offset)
        if kind == "raise":
            raise ValueError(f"boom {r.offset}")
        if kind == "base-raise":
            raise asyncio.CancelledError(f"cancel {r.offset}")
        if kind == "suspend":
            await asyncio.sleep(0)
            return Output("t", r.value, key=r.key)
        if kind == "suspend-none":
            await asyncio.sleep(0)
            return None
        raise AssertionError(kind)

    return process


async def _to_row(aw: Coroutine[Any, Any, object]) -> object:
    got = await aw
    return Output("row", got.value, key=got.key) if type(got) is Output else got


def route(result: object) -> object:
    if type(result) is tuple and result[0] == "marker":
        return Output("routed", b"%d" % result[1])
    if result == ("marker", -1):
        raise TypeError("never")
    return result


def _summary(why: int, got: Any) -> Any:
    if why == RAISED:
        return (type(got), str(got))
    if why == AWAIT:
        return (type(got[0]).__name__, got[1] is UNSTARTED)
    return got


async def _driven(
    fn: Any, recs: list[Any], kinds: list[str], seed: int, routed: bool, entering: bool = True
) -> Any:
    """``fn`` driven as the engine drives it, with deadlines, an ``ending`` and yield
    times drawn from ``seed``: every return and the outputs in the end."""
    rng = random.Random(seed)
    process = processor(kinds)
    outputs: list[Output] = []
    seen: list[Any] = []
    # topic b's runs taken by another process from the run's entering, for half the
    # seeds that enter (as a join's table rows): its outputs go to topic "row"
    rows = processor(kinds[::-1]) if seed % 8 < 2 else None

    def row(r: Any) -> Awaitable[object]:
        assert rows is not None
        aw = rows(r)
        if isinstance(aw, Coroutine):
            return _to_row(aw)
        return aw

    def entered(partition: tuple[str, int]) -> Callable[[Any], Awaitable[object]] | None:
        seen.append(("enter", partition))  # each run's partition, in order
        return row if rows is not None and partition[0] == "b" else None

    done_future = asyncio.get_running_loop().create_future()
    done_future.set_result(None)
    pending = asyncio.get_running_loop().create_future()
    i = 0
    while i < len(recs):
        deadline = -INF if rng.random() < 0.05 else INF
        ending = rng.choice([None, None, pending, done_future if rng.random() < 0.1 else None])
        yield_at = -INF if rng.random() < 0.1 else INF
        routing = route if routed else None
        enter = entered if entering else None
        i, why, got = fn(recs, i, process, routing, enter, outputs, deadline, ending, yield_at)
        seen.append((i, why, _summary(why, got)))
        if why in (END, STOP, YIELD):
            continue
        if why == AWAIT:
            aw, yielded = got
            result = await (aw if yielded is UNSTARTED else _native.resumed(aw, yielded))
            seen.append(("awaited", result))
        i += 1
    pending.cancel()
    return seen, outputs


KINDS = [
    "bytes", "keyless", "none", "str-value", "str-key", "list", "marker", "raise",
    "base-raise", "suspend", "suspend-none", "later", "sync-raise",
]  # fmt: skip


# 40 random runs of 300 records, each record's processor doing one of KINDS (weighted to
# the common Output of bytes), with and without a route, deadlines passed, an ``ending``
# done and yield times drawn per call: the compiled loop returns where, why and with
# what the reference does, and leaves the same outputs. Caught (in ``_drive.pyx``): the
# route not applied; the key's type not checked (an Output with a str key taken as
# bytes); the time asked at the first record; a suspension taken as a return; an
# ``ending`` not asked; what a run's entering returned not taken for its records (or
# taken for the runs after it).
@pytest.mark.parametrize("seed", range(40))
def test_compiled_drive_is_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    recs = records(rng, 300)
    kinds = ["bytes"] * 20 + rng.sample(KINDS, rng.randrange(3, len(KINDS)))
    routed, entering = bool(seed % 2), seed % 4 < 2
    want = asyncio.run(_driven(_drive_py.drive, recs, kinds, seed, routed, entering))
    got = asyncio.run(_driven(_native.drive, recs, kinds, seed, routed, entering))
    assert got == want


# Every reason appears somewhere: the runs above test them all.
def test_the_random_runs_meet_every_reason() -> None:
    reasons: set[int] = set()
    for seed in range(40):
        rng = random.Random(seed)
        recs = records(rng, 300)
        kinds = ["bytes"] * 20 + rng.sample(KINDS, rng.randrange(3, len(KINDS)))
        seen, _ = asyncio.run(_driven(_native.drive, recs, kinds, seed, bool(seed % 2)))
        reasons |= {step[1] for step in seen if len(step) == 3}
    assert reasons == {END, STOP, YIELD, RESULT, AWAIT, RAISED}


# Each run of one partition's records gets the offset after its last, over a prefix of
# every length, Records and lookalikes, partitions past the small integers Python keeps
# once. Caught (in ``_drive.pyx``): the last run not written; a run's end read from the
# wrong record (its first).
def test_compiled_mark_runs_is_the_reference() -> None:
    rng = random.Random(9)
    for _ in range(200):
        recs = records(rng, rng.randrange(0, 60))
        done = rng.randrange(0, len(recs) + 1)
        want: dict[tuple[str, int], int] = {("a", 0): -5}
        got = dict(want)
        _drive_py.mark_runs(recs, done, want)
        _native.mark_runs(recs, done, got)
        assert got == want


def _only(coro: Any) -> Callable[[Any], Any]:
    return lambda r: coro


# A coroutine ``drive`` left suspended, finished by ``resumed`` inside a task: the value
# the loop sends in reaches it; a cancellation is thrown into it (it may catch it and
# return, or let it end the task); closing the task's coroutine closes it. Caught
# (in ``_drive_py.resumed``): a throw not passed on (the coroutine never saw the
# cancellation); a close not passed on.
def test_resumed_is_await_from_where_drive_left() -> None:
    seen: list[str] = []

    async def waits(fut: asyncio.Future[str], catch: bool) -> str:
        try:
            return await fut
        except asyncio.CancelledError:
            seen.append("cancelled")
            if catch:
                return "caught"
            raise
        finally:
            seen.append("finally")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for how in ("value", "catch", "cancel"):
            fut: asyncio.Future[str] = loop.create_future()
            coro = waits(fut, catch=how == "catch")
            i, why, got = _native.drive(
                [Record("t", 0, 0, None, b"")], 0, _only(coro), None, None, [], INF, None, INF
            )
            assert (i, why) == (0, AWAIT) and got[0] is coro
            task = asyncio.ensure_future(_native.resumed(*got))
            await asyncio.sleep(0)
            if how == "value":
                fut.set_result("sent")
                assert await task == "sent"
            else:
                task.cancel()
                if how == "catch":
                    assert await task == "caught"
                else:
                    with pytest.raises(asyncio.CancelledError):
                        await task
        seen.append("|")
        fut = loop.create_future()
        coro = waits(fut, catch=False)
        _i, _why, got = _native.drive(
            [Record("t", 0, 0, None, b"")], 0, _only(coro), None, None, [], INF, None, INF
        )
        gen = _native.resumed(*got)
        gen.send(None)  # as a task's first step: it yields what drive was given
        gen.close()
        assert seen[-1] == "finally"  # closed now, not when collected

    asyncio.run(main())
    assert seen == ["finally", "cancelled", "finally", "cancelled", "finally", "|", "finally"]
