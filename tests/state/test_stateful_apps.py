"""Stateful apps end to end: the running count and the deduplication of ``examples/``,
and the dead-letter policy with state."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from aiokafka import AIOKafkaProducer
from kit import T0_MS, create_topic, eventually
from stateful import changelog, seed_keys, state_config, until_committed

import eosflow
from eosflow.testing import check_counts, check_state, read_topic
from eosflow.testing._ladder import Broker
from examples.counting import Count
from examples.dedup import Dedup


async def test_counts_are_exactly_once(eosflow_broker: Broker, tmp_path: Path) -> None:
    b = eosflow_broker
    src, group = b.unique("words"), b.unique("count")
    dst = f"{src}-counts"
    await create_topic(b.bootstrap_servers, src, 3)
    await create_topic(b.bootstrap_servers, dst, 3)
    await seed_keys(b.bootstrap_servers, src, 3000, 50)
    session_s = max(b.min_session_timeout_s, 1.0) * 6
    cfg = state_config(b.bootstrap_servers, group, src, b.unique("tx"), tmp_path, session_s)
    app = eosflow.EosApp(Count(), cfg)
    async with app:

        async def done() -> bool:
            assert app.failure is None, app.failure
            return app.stats.records >= 3000 and app.last_outcome is eosflow.Outcome.COMMITTED

        await eventually(done, timeout_s=60, what="all input counted and committed")
    cl = changelog(group, src)
    report = await check_counts(b.bootstrap_servers, src, dst, cl, group_id=group)
    assert report.ok, report.summary()
    assert report.found == 50


class CountOrFail(eosflow.Processor):
    """Counts per key, then raises for a record whose value is ``bad`` -- after its write."""

    stores = {"counts": eosflow.JSON}

    def __init__(self, out: str) -> None:
        self.out = out

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        counts = self.state("counts")
        n = counts.get(record.key or b"", 0) + 1
        counts.put(record.key or b"", n)
        if record.value == b"bad":
            raise ValueError("bad record")
        if record.value == b"wrong":
            return n  # type: ignore[return-value]  # not an Output: dead-lettered
        return eosflow.Output(self.out, str(n), key=record.key)


# A record that raises, or returns what is not an Output, is dead-lettered without the
# writes it made. Caught: not taking them back (the bad records were counted); checking
# the outputs only after the undo (the wrong ones were counted).
async def test_a_dead_lettered_record_leaves_no_write(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    src, dst, dlq, group = b.unique("in"), b.unique("out"), b.unique("dlq"), b.unique("g")
    for topic in (src, dst, dlq):
        await create_topic(b.bootstrap_servers, topic, 1)
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await p.start()
    try:
        for i in range(400):
            value = b"bad" if i % 7 == 0 else b"wrong" if i % 11 == 0 else b"ok"
            await p.send(src, value, key=f"k{i % 10}".encode())
        await p.flush()
    finally:
        await p.stop()
    cfg = state_config(
        b.bootstrap_servers, group, src, b.unique("tx"), tmp_path, dead_letter_topic=dlq
    )
    app = eosflow.EosApp(CountOrFail(dst), cfg)
    async with app:
        await until_committed(b.bootstrap_servers, src, 1, group, 400, (app,))
    bad = [i for i in range(400) if i % 7 == 0 or i % 11 == 0]
    assert app.stats.dead_lettered == len(bad)
    want = Counter(f"k{i % 10}".encode() for i in range(400) if i not in bad)
    report = await check_state(
        b.bootstrap_servers, changelog(group, src), dict(want), serde=eosflow.JSON
    )
    assert report.ok, report.summary()


async def test_dedup_passes_each_id_once_within_its_window(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    src, group = b.unique("events"), b.unique("g")
    dst = f"{src}-unique"
    await create_topic(b.bootstrap_servers, src, 1)
    await create_topic(b.bootstrap_servers, dst, 1)
    t0 = T0_MS  # within the broker's retention (kit.T0_MS)
    events = [(b"a", 0), (b"a", 1), (b"b", 2), (b"b", 5), (b"a", 20), (b"c", 21), (b"a", 22)]
    p = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)
    await p.start()
    try:
        for key, s in events:
            await p.send(src, f"{key.decode()}@{s}".encode(), key=key, timestamp_ms=t0 + s * 1000)
        await p.flush()
    finally:
        await p.stop()
    os.environ["EOSFLOW_APP_WINDOW_S"] = "10"
    try:
        app = eosflow.EosApp(
            Dedup(), state_config(b.bootstrap_servers, group, src, b.unique("tx"), tmp_path)
        )
    finally:
        del os.environ["EOSFLOW_APP_WINDOW_S"]
    async with app:
        await until_committed(b.bootstrap_servers, src, 1, group, len(events), (app,))
    out = [v for _p, _o, _k, v in await read_topic(b.bootstrap_servers, dst)]
    assert out == [b"a@0", b"b@2", b"a@20", b"c@21"]
    # b expired when a@20 came (last passed at 2 s, over 10 s before)
    seen = await check_state(
        b.bootstrap_servers,
        changelog(group, src, "seen"),
        {b"a": t0 + 20_000, b"c": t0 + 21_000},
        serde=eosflow.JSON,
    )
    assert seen.ok, seen.summary()
