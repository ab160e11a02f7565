"""Event-time timers (``examples/order_timeout.py``) on the test cluster: every order
``paid`` or ``expired`` exactly once, as the input alone says. The comment above each
test names the mutation that made it fail when the mechanism was taken out."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from kit import T0_MS
from stateful import changelog, state_config, until_committed

import eosflow
from eosflow.testing import FakeCluster, read_topic
from examples.order_timeout import OrderTimeout

TIMEOUT_S = 15.0
Event = tuple[int, bytes, str, int]  # partition, order id, "order" or "payment", time ms


def day(partition: int, orders: int, start_s: float) -> list[Event]:
    """One order a second from ``start_s``; order i is paid 5 s later when i % 3 == 0,
    20 s later (too late) when i % 3 == 1, never when i % 3 == 2."""
    events: list[Event] = []
    for i in range(orders):
        key, t = f"o{partition}-{i}".encode(), round((start_s + i) * 1000)
        events.append((partition, key, "order", t))
        if i % 3 != 2:
            events.append((partition, key, "payment", t + (5_000 if i % 3 == 0 else 20_000)))
    return sorted(events, key=lambda e: e[3])  # arrival in event-time order


def expected(events: list[Event]) -> Counter[tuple[bytes, str]]:
    """Each partition's events in arrival order: the outcomes a timer of TIMEOUT_S gives
    (stream time = the largest time so far in the partition)."""
    out: Counter[tuple[bytes, str]] = Counter()
    stream: dict[int, int] = {}
    pending: dict[int, dict[bytes, int]] = {}
    for p, key, kind, t in events:
        now = stream[p] = max(stream.get(p, t), t)
        timers = pending.setdefault(p, {})
        if kind == "order":
            timers[key] = t + round(TIMEOUT_S * 1000)
        else:
            out[
                (key, "paid" if timers.pop(key, None) is not None else "payment-without-order")
            ] += 1
        for k in [k for k, due in timers.items() if due <= now]:
            del timers[k]
            out[(k, "expired")] += 1
    return out


async def produce(bootstrap: str, topic: str, events: list[Event]) -> None:
    """``events``, each stamped its ms after ``T0_MS`` (within a broker's retention)."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await p.start()
    try:
        futs = [
            await p.send(
                topic,
                json.dumps({"type": kind}).encode(),
                key=key,
                partition=part,
                timestamp_ms=T0_MS + t,
            )
            for part, key, kind, t in events
        ]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def outcomes(bootstrap: str, topic: str) -> Counter[tuple[bytes, str]]:
    return Counter(
        (k or b"", (v or b"").decode()) for _p, _o, k, v in await read_topic(bootstrap, topic)
    )


def config(c: FakeCluster, txn: str, state_dir: Path, **kw: object) -> eosflow.EosConfig:
    return state_config(c.bootstrap_servers, "g", "orders", txn, state_dir, **kw)


# Each partition's timers fire on its own stream time, once each, with the transaction
# that deletes them; a payment cancels its order's timer; timers not yet due stay in
# the changelog. Caught: a fired timer not deleted (it fired again at every later
# record: 'expired' many times); a cancel that leaves the timer (paid orders expired too);
# the stream time not kept (each record's own time taken for it: the out-of-order
# order's timer waited, and its payment found it pending: 'paid'); a timer set below
# the low bound the last firing left not lowering it (the out-of-order order's timer
# never found: not expired).
async def test_each_timer_fires_once_on_its_partitions_stream_time(
    eosflow_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EOSFLOW_APP_TIMEOUT_S", str(TIMEOUT_S))
    c = eosflow_cluster
    c.create_topic("orders", 2)
    c.create_topic("orders-outcomes", 1)
    events = day(0, 60, 0) + day(1, 30, 1000)  # partition 1 a thousand seconds ahead
    # out of order, at stream time 78 s: an order of 50 s, due at 65 s, so at once;
    # its payment (70 s) finds it expired
    events += [(0, b"o0-old", "order", 50_000), (0, b"o0-old", "payment", 70_000)]
    events += [(0, b"o0-last", "order", 200_000), (1, b"o1-last", "order", 1_200_000)]
    await produce(c.bootstrap_servers, "orders", events)
    app = eosflow.EosApp(OrderTimeout(), config(c, "tx-1", tmp_path, max_records_per_txn=25))
    async with app:
        await until_committed(c.bootstrap_servers, "orders", 2, "g", len(events), (app,))
    want = expected(events)
    assert await outcomes(c.bootstrap_servers, "orders-outcomes") == want
    assert want[(b"o0-0", "paid")] == 1 and want[(b"o0-1", "expired")] == 1
    assert want[(b"o0-1", "payment-without-order")] == 1
    assert want[(b"o0-old", "expired")] == want[(b"o0-old", "payment-without-order")] == 1
    # the last orders' timers are not due: still in the changelog, one per order
    pending = await committed_keys(c.bootstrap_servers, changelog("g", "orders", "timers"))
    assert pending == {b"k" + k for k in {e[1] for e in events} - {k for k, _ in want}}
    assert pending == {b"ko0-last", b"ko1-last"}


# Timers live in the changelog: a second instance with no local copy restores the
# pending ones and the stream time, and fires each once. Caught: a fired timer not
# deleted (fired again by the second instance); a cancel that leaves the timer.
async def test_timers_restore_and_fire_once(
    eosflow_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EOSFLOW_APP_TIMEOUT_S", str(TIMEOUT_S))
    c = eosflow_cluster
    c.create_topic("orders", 1)
    c.create_topic("orders-outcomes", 1)
    events = day(0, 90, 0)
    first, second = events[:80], events[80:]
    await produce(c.bootstrap_servers, "orders", first)
    async with eosflow.EosApp(OrderTimeout(), config(c, "tx-1", tmp_path / "a")) as app:
        await until_committed(c.bootstrap_servers, "orders", 1, "g", len(first), (app,))
    await produce(c.bootstrap_servers, "orders", second)
    async with eosflow.EosApp(OrderTimeout(), config(c, "tx-2", tmp_path / "b")) as app:
        await until_committed(c.bootstrap_servers, "orders", 1, "g", len(events), (app,))
    assert await outcomes(c.bootstrap_servers, "orders-outcomes") == expected(events)


async def committed_keys(bootstrap: str, topic: str) -> set[bytes]:
    state: dict[bytes, bytes] = {}
    for _p, _o, k, v in await read_topic(bootstrap, topic):
        if k is not None and k.startswith(b"k"):
            if v is None:
                state.pop(k, None)
            else:
                state[k] = v
    return set(state)


# Timers due together fire one by one: one's fire may cancel or move another, which then
# does not fire as it was. And a store named "timers" in a processor without fire is a
# store like any other. Caught: due timers deleted as they were listed (the cancelled
# one fired); timers switched on by the store's name (its JSON values refused, the app
# stopped).
async def test_fire_may_cancel_a_timer_due_with_it_and_timers_is_a_plain_name(
    eosflow_cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EOSFLOW_APP_TIMEOUT_S", str(TIMEOUT_S))
    c = eosflow_cluster
    for topic in ("orders", "orders-outcomes", "notes"):
        c.create_topic(topic, 1)

    class CancelsTheOther(OrderTimeout):
        async def fire(self, timer: eosflow.Timer) -> eosflow.Output:
            self.timers.cancel(b"o-b")  # due with o-a, after it
            return await super().fire(timer)

    class Plain(eosflow.Processor):
        stores = {"timers": eosflow.JSON}

        async def process(self, record: eosflow.Record) -> eosflow.Output:
            notes = self.state("timers")
            n = notes.get(b"total", 0) + 1
            notes.put(b"total", n)
            return eosflow.Output("notes", str(n))

    events = [(0, b"o-a", "order", 1_000), (0, b"o-b", "order", 1_000), (0, b"x", "order", 99_000)]
    await produce(c.bootstrap_servers, "orders", events)
    async with eosflow.EosApp(CancelsTheOther(), config(c, "tx-1", tmp_path / "a")) as app:
        await until_committed(c.bootstrap_servers, "orders", 1, "g", 3, (app,))
    assert await outcomes(c.bootstrap_servers, "orders-outcomes") == {(b"o-a", "expired"): 1}
    cfg = state_config(c.bootstrap_servers, "plain", "orders", "tx-2", tmp_path / "b")
    async with eosflow.EosApp(Plain(), cfg) as app:
        await until_committed(c.bootstrap_servers, "orders", 1, "plain", 3, (app,))
    assert [v for _p, _o, _k, v in await read_topic(c.bootstrap_servers, "notes")] == [
        b"1",
        b"2",
        b"3",
    ]
