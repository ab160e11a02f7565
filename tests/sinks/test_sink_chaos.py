"""Exactly once into PostgreSQL under chaos (issue 35): three `eosflow run` instances of
a sink (``tests/procs/slow_sink.py``: rows into a table without a unique constraint,
~3 ms a record inside the database transaction), on the ladder's broker (genuine Kafka
4.4.0 in CI's third stage).

A seeded schedule (``tests/fleet.py``'s): an instance SIGKILLed and restarted, another
SIGSTOPped past its session timeout and woken as a zombie (its write transaction, open
when it stopped, holds its rows' locks: the new owner's claim waits for it or for the
server to end it), one more SIGKILLed; and PostgreSQL itself SIGKILLed (its whole
process group) mid-run and started again after a pause. Then every input record must
be exactly one row, the positions in the database at the input's end, the group's
offsets in Kafka following them, no instance dead on the way, each exiting 0 on SIGTERM.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from fleet import Fleet, chaos_env, chaos_schedule, committed_total, seed
from kit import create_topic

from eosflow._servers import Postgres
from eosflow.testing._ladder import Broker

RECORDS, PARTS, INSTANCES = 12_000, 6, 3


@pytest.fixture
async def postgres() -> AsyncIterator[Postgres]:
    async with Postgres() as pg:
        conn = await asyncpg.connect(pg.dsn)
        await conn.execute("CREATE TABLE rows (topic text, partition int, off bigint)")
        await conn.close()
        yield pg


async def positions(pg: Postgres, group: str) -> int:
    """The sum of the group's positions in the database (0 while it is down)."""
    try:
        conn = await asyncpg.connect(pg.dsn, timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return 0
    try:
        total = await conn.fetchval(
            "SELECT coalesce(sum(next_offset), 0) FROM eosflow_offsets WHERE group_id = $1",
            group,
        )
        return int(total)
    except asyncpg.UndefinedTableError:
        return 0
    finally:
        await conn.close()


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTS)]
        return {tp.partition: o for tp, o in (await c.end_offsets(tps)).items()}
    finally:
        await c.stop()


async def test_sink_exactly_once_under_chaos(
    eosflow_broker: Broker, postgres: Postgres, tmp_path: Path
) -> None:
    b = eosflow_broker
    rng = random.Random(20261128)
    src, group = b.unique("sink-chaos-in"), b.unique("sink-chaos-g")
    await create_topic(b.bootstrap_servers, src, PARTS)
    await seed(b.bootstrap_servers, src, RECORDS)
    session_s = max(b.min_session_timeout_s, 2.0)
    env = chaos_env(session_s) | {
        "EOSFLOW_POSTGRES_DSN": postgres.dsn,
        "EOSFLOW_GROUP_PROTOCOL": "classic",
        "EOSFLOW_RETRY_TIMEOUT_S": "120",
        "EOSFLOW_MAX_RECORDS_PER_TXN": "200",
        "CHAOS_DELAY_S": "0.003",  # ~36 s of writing in all: the chaos lands mid-run
    }
    fleet = Fleet(
        b.bootstrap_servers,
        src,
        "",
        group,
        b.unique("sink-chaos"),
        env,
        target="slow_sink:SlowSink",
        log_dir=tmp_path,
    )
    events: list[str] = []
    began = time.monotonic()

    async def database_chaos() -> None:
        await asyncio.sleep(rng.uniform(3.0, 5.0))
        events.append(f"{time.monotonic() - began:.1f}s SIGKILL PostgreSQL")
        postgres.kill()
        await asyncio.sleep(rng.uniform(2.0, 4.0))
        await postgres.start()
        events.append(f"{time.monotonic() - began:.1f}s PostgreSQL restarted")

    for i in range(INSTANCES):
        await fleet.start(i)
    try:
        await asyncio.gather(
            chaos_schedule(fleet, rng, INSTANCES, session_s, events), database_chaos()
        )
        at_chaos_end = await positions(postgres, group)
        assert at_chaos_end < RECORDS, f"the run ended before the chaos did; {events}"
        events.append(f"{at_chaos_end} written when the chaos ended")
        deadline = time.monotonic() + 180
        while (done := await positions(postgres, group)) < RECORDS:
            assert time.monotonic() < deadline, f"stalled at {done}/{RECORDS}; {events}"
            await fleet.check_alive(events)
            await asyncio.sleep(0.5)
        assert done == RECORDS, f"positions past the input: {done}; {events}"
        while await committed_total(b.bootstrap_servers, src, PARTS, group) < RECORDS:
            assert time.monotonic() < deadline, f"Kafka's offsets behind; {events}"
            await asyncio.sleep(0.5)
    finally:
        codes = await fleet.stop_all()
    assert codes == [0] * INSTANCES, f"exit codes {codes}; {events}"
    conn = await asyncpg.connect(postgres.dsn)
    try:
        found = await conn.fetch("SELECT topic, partition, off FROM rows")
    finally:
        await conn.close()
    rows = [(r["topic"], r["partition"], r["off"]) for r in found]
    duplicates = len(rows) - len(set(rows))
    ends = await end_offsets(b.bootstrap_servers, src)
    assert sum(ends.values()) == RECORDS
    expected = {(src, p, o) for p, end in ends.items() for o in range(end)}
    assert duplicates == 0, f"{duplicates} duplicates; {events}"
    assert set(rows) == expected, f"{len(expected - set(rows))} missing; {events}"
    print(f"events: {events}")
