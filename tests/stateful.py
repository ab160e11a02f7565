"""Helpers of the stateful tests: the counting app's config, keyed input, waiting for the
group's progress, the count check (``eosflow.testing.check_counts``), and ``Counting``,
which gives a processor state."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from fleet import committed_total
from kit import T0_MS
from slow_time import IDLE_MS, SLIDING, WINDOW

import eosflow
from eosflow._checks._checker import read_records
from eosflow.testing import FakeCluster, StateReport, check_counts, check_windows, read_topic


class Counting(eosflow.Processor):
    """Put before a processor's class among a test processor's bases: one count kept in
    a store per record, then the processor's own ``process`` -- an app with state, which
    works ahead by default."""

    stores = {"counts": eosflow.JSON}

    async def process(self, record: eosflow.Record) -> object:
        counts = self.state("counts")
        counts.put(b"k", counts.get(b"k", 0) + 1)
        return await super().process(record)


def changelog(group: str, src: str, store: str = "counts") -> str:
    return f"{group}--{src}--{store}--changelog"


def state_config(
    bootstrap: str,
    group: str,
    src: str,
    transactional_id: str,
    state_dir: Path | str,
    session_s: float = 6.0,
    **kw: object,
) -> eosflow.EosConfig:
    base: dict[str, object] = dict(
        bootstrap_servers=bootstrap,
        group_id=group,
        input_topics=(src,),
        transactional_id=transactional_id,
        session_timeout_s=session_s,
        heartbeat_interval_s=session_s / 10,
        transaction_timeout_s=session_s * 0.8,
        state_dir=str(state_dir),
    )
    base.update(kw)
    return eosflow.EosConfig(**base)  # type: ignore[arg-type]


async def seed_keys(
    bootstrap: str,
    topic: str,
    n: int,
    keys: int,
    start: int = 0,
    key_bytes: int = 0,
    timestamp_ms: Callable[[int], int] | None = None,
) -> None:
    """Records ``start``..``start+n`` with keys cycling through ``keys`` distinct ones
    (``k<i % keys>``, padded to ``key_bytes``), placed by the key's hash as Kafka does,
    so every record of a key is in one partition; record i's timestamp is
    ``timestamp_ms(i)`` when given (else the producer's clock)."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await p.start()
    try:
        futs = []
        for i in range(start, start + n):
            key = f"k{i % keys}".encode().ljust(key_bytes, b".")
            ts = None if timestamp_ms is None else timestamp_ms(i)
            futs.append(await p.send(topic, b"x", key=key, timestamp_ms=ts))
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def produce_at(
    bootstrap: str, topic: str, events: list[tuple[int, bytes, int]], value: bytes | None = None
) -> None:
    """One record per (partition, key, ms) of ``events``, in order, stamped that many ms
    after ``T0_MS`` (this day's start: never older than a broker's retention), with
    ``value`` (or, when None, the event's key as its value)."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await p.start()
    try:
        futs = [
            await p.send(
                topic,
                key if value is None else value,
                key=key,
                partition=n,
                timestamp_ms=T0_MS + t,
            )
            for n, key, t in events
        ]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def live_orders(
    bootstrap: str,
    topic: str,
    n: int,
    product_of: Callable[[int], str],
    spacing_ms: int,
    every: int,
    pause_s: float,
) -> None:
    """Orders 0..n-1 produced while an app runs, ``every`` at a time then ``pause_s``
    (pacing the source, not synchronising): order i keyed by its customer ``c{i % 37}``,
    its value JSON naming ``product_of(i)``, at T0 + i * ``spacing_ms``."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await p.start()
    try:
        for i in range(n):
            value = json.dumps({"order": i, "product": product_of(i)}).encode()
            key = f"c{i % 37}".encode()
            await p.send(topic, value, key=key, timestamp_ms=T0_MS + i * spacing_ms)
            if i % every == every - 1:
                await p.flush()
                await asyncio.sleep(pause_s)
        await p.flush()
    finally:
        await p.stop()


async def in_two_halves(
    bootstrap: str,
    src: str,
    partitions: int,
    events: list[tuple[int, bytes, int]],
    processor: Callable[[], eosflow.Processor],
    state_dir: Path,
    value: bytes = b"v",
) -> None:
    """The first half of ``events`` (``produce_at``) processed by one instance of group
    ``g`` to its commit, then the rest by a second one with its own local copy (which
    restores the first one's state from the changelogs)."""
    half = len(events) // 2
    for n, (txn, part, upto) in enumerate(
        (("tx-1", events[:half], half), ("tx-2", events[half:], len(events)))
    ):
        await produce_at(bootstrap, src, part, value)
        cfg = state_config(bootstrap, "g", src, txn, state_dir / str(n))
        async with eosflow.EosApp(processor(), cfg) as app:
            await until_committed(bootstrap, src, partitions, "g", upto, (app,))


async def until_committed(
    bootstrap: str,
    topic: str,
    partitions: int,
    group: str,
    target: int,
    apps: tuple[eosflow.EosApp, ...] = (),
    timeout_s: float = 60.0,
) -> None:
    """Wait until ``group`` committed ``target`` input records in all, failing early when
    one of ``apps`` ended on an error."""
    deadline = time.monotonic() + timeout_s
    while (done := await committed_total(bootstrap, topic, partitions, group)) < target:
        for app in apps:
            assert app.failure is None, app.failure
        assert time.monotonic() < deadline, f"stalled at {done}/{target}"
        await asyncio.sleep(0.1)


async def until_each_partition_committed(
    bootstrap: str, topic: str, partitions: int, group: str, apps: tuple[eosflow.EosApp, ...]
) -> None:
    """Wait until ``group`` committed something on every partition of ``topic`` (so each
    partition's stores hold state that a new owner must restore)."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        deadline = time.monotonic() + 60
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        while not all([(await c.committed(tp) or 0) > 0 for tp in tps]):
            for app in apps:
                assert app.failure is None, app.failure
            assert time.monotonic() < deadline, "a partition saw no commit within 60 s"
            await asyncio.sleep(0.1)
    finally:
        await c.stop()


async def counts_ok(bootstrap: str, src: str, group: str, output: str | None = None) -> StateReport:
    """The count check of ``examples/counting.py``'s run (output ``<src>-counts``
    unless named), asserted."""
    report = await check_counts(
        bootstrap, src, output or f"{src}-counts", changelog(group, src), group_id=group
    )
    assert report.ok, report.summary()
    return report


def event_times(rng: random.Random, every_ms: int = 10) -> Callable[[int], int]:
    """Record i's event time for ``seed_keys``: ``every_ms`` a record from the start of
    this minute, one in 20 up to 4 s early (out of order, some of them late for their
    window). Today's times: a genuine broker deletes a log whose times are older than
    its retention (7 days) at its next retention check, mid-test."""
    early: dict[int, int] = {}
    start = int(time.time() // 60 * 60_000)

    def at(i: int) -> int:
        if i not in early:
            early[i] = rng.randrange(4000) if rng.random() < 0.05 else 0
        return start + every_ms * i - early[i]

    return at


async def time_ok(bootstrap: str, src: str, dst: str) -> None:
    """The checks of ``tests/procs/slow_time.py``'s run beyond its counts: every window's
    final in ``<dst>-windows`` and ``<dst>-recent`` (sliding) and every idle timer in
    ``<dst>-timers`` exactly once, as the input alone gives them; the wall-clock
    reminders (``reminders_ok``: run it once more while the instances run, to wait for
    the last ones)."""
    windows = await check_windows(bootstrap, src, f"{dst}-windows", WINDOW)
    assert windows.ok and windows.expected > 1000, windows.summary()
    recent = await check_windows(bootstrap, src, f"{dst}-recent", SLIDING)
    assert recent.ok and recent.expected > 1000, recent.summary()
    await reminders_ok(bootstrap, src, dst)
    fired = Counter(
        (k, int(v or b"")) for _p, _o, k, v in await read_topic(bootstrap, f"{dst}-timers")
    )
    want = await timers_due(bootstrap, src)
    assert fired == want and len(want) > 1000, (len(fired), len(want), fired - want, want - fired)


async def reminders_ok(bootstrap: str, src: str, dst: str, timeout_s: float = 60.0) -> None:
    """The wall-clock reminders (set at each record, replacing the key's last): none fired
    twice, each one a record of its key set, and -- once the input is idle -- every key's
    last one fired. Which earlier ones fired depends on timing, so those are not
    counted."""
    records = await read_records(bootstrap, src)  # a key's records are in one partition
    last: dict[bytes | None, int] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        last[r.key] = r.offset
    deadline = time.monotonic() + timeout_s
    while True:
        fired = Counter(
            (k, int(v or b"")) for _p, _o, k, v in await read_topic(bootstrap, f"{dst}-reminders")
        )
        assert max(fired.values(), default=1) == 1, [f for f, n in fired.items() if n > 1]
        if all((k, off) in fired for k, off in last.items()):
            break
        assert time.monotonic() < deadline, "the last reminders did not all fire"
        await asyncio.sleep(0.5)
    mine = {(r.key, r.offset) for r in records}
    assert set(fired) <= mine, sorted(set(fired) - mine)[:5]


async def timers_due(bootstrap: str, src: str) -> Counter[tuple[bytes | None, int]]:
    """The idle timers the input gives (``slow_time.py``): per partition in offset order,
    each record moves its key's timer to its time + IDLE_MS; a timer fires once the
    partition's stream time reaches it."""
    records = sorted(await read_records(bootstrap, src), key=lambda r: (r.partition, r.offset))
    fired: Counter[tuple[bytes | None, int]] = Counter()
    stream: dict[int, int] = {}
    pending: dict[int, dict[bytes | None, int]] = {}
    for r in records:
        now = stream[r.partition] = max(stream.get(r.partition, r.timestamp), r.timestamp)
        timers = pending.setdefault(r.partition, {})
        timers[r.key] = r.timestamp + IDLE_MS
        for key in [k for k, due in timers.items() if due <= now]:
            fired[(key, timers.pop(key))] += 1
    return fired


def clicks_at(partition: int, times_s: list[float], keys: int = 5) -> list[tuple[int, bytes, int]]:
    """(partition, key, timestamp ms) for a click at each of ``times_s``; keys cycle."""
    return [
        (partition, f"u{partition}-{i % keys}".encode(), int(t * 1000))
        for i, t in enumerate(times_s)
    ]


def steady(start_s: float, end_s: float, step_s: float) -> list[float]:
    n = int((end_s - start_s) / step_s)
    return [start_s + i * step_s for i in range(n)]


async def race_clicks(
    c: FakeCluster, processor: eosflow.Processor, state_dir: Path, **cfg: object
) -> tuple[eosflow.EosApp, int]:
    """The windows tests' clicks, for 10 s windows with a 2 s grace, through ``processor``
    (topic ``in`` of ``c``, 2 partitions; finals to ``in-per-window``; group ``g``):
    partition 0's to 94.5 s with, at 20.5 s, a click in the grace of [10, 20) (it closes at
    22 s) and a late one (7.5 s: [0, 10) closed at 12 s), processed to their commit; then
    partition 1's far behind, to 39.75 s. Returns the app (stopped) and the clicks."""
    src, boot = "in", c.bootstrap_servers
    c.create_topic(src, 2)
    c.create_topic(f"{src}-per-window", 1)
    ahead = steady(0, 95, 0.5)
    ahead[42:42] = [19.0, 7.5]
    behind = steady(0, 40, 0.25)
    await produce_at(boot, src, clicks_at(0, ahead), b"click")
    app = eosflow.EosApp(processor, state_config(boot, "g", src, "tx-1", state_dir, **cfg))
    async with app:
        await until_committed(boot, src, 2, "g", len(ahead), (app,))
        await produce_at(boot, src, clicks_at(1, behind), b"click")
        await until_committed(boot, src, 2, "g", len(ahead) + len(behind), (app,))
    return app, len(ahead) + len(behind)
