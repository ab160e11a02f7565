"""The contenders of ``python -m benchmarks sink``, one per process:

    python -m benchmarks._sink_contenders NAME BOOT SRC N GROUP DSN TABLE <budget argv>

Each writes every record of ``SRC`` as a row ``(partition, off, value)`` of ``TABLE``
(made beforehand, no unique constraint) with the same batching rule (``Budget``:
eosflow's defaults), and prints one JSON line: ``seconds`` from its first record polled
to the database COMMIT that made its last row visible -- the same clock for all, as a
PostgreSQL commit is visible once it returns (eosflow's start: its first transaction's
``started``, when that batch's first records were polled).

- ``eosflow-sink``: ``eosflow.PostgresSink`` (asyncpg, COPY), exactly once: the rows
  and the positions in one transaction, the claims checked;
- ``asyncpg-loop``: what an asyncpg user writes, at least once: aiokafka's consumer,
  COPY in a transaction, then the group's offsets committed to Kafka;
- ``psycopg-loop``: the same loop on psycopg 3 (``cursor.copy``), for the driver choice.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer

from benchmarks._budget import Budget, TxnRule, eosflow_settings
from benchmarks._contenders import IDLE_MS, peak_rss_mb

COLUMNS = ["partition", "off", "value"]
transactions = [0]  # this process's contender's, counted as it commits


async def run_eosflow(
    boot: str, src: str, n: int, group: str, dsn: str, table: str, b: Budget
) -> float:
    import eosflow

    first: list[float] = []
    done: list[float] = []
    written = [0]

    class Rows(eosflow.PostgresSink):
        async def write(self, conn: Any, records: Sequence[eosflow.Record]) -> None:
            rows = [(r.partition, r.offset, r.value) for r in records]
            await conn.copy_records_to_table(table, records=rows, columns=COLUMNS)

    class Clock(eosflow.Observer):
        def transaction_ended(self, report: eosflow.TransactionReport) -> None:
            if not first:  # its first records polled, as the loops' clock
                first.append(report.started)
            if report.outcome is eosflow.Outcome.COMMITTED:
                written[0] += report.records
                transactions[0] += 1
                if written[0] >= n and not done:
                    done.append(report.ended)

    config = eosflow.EosConfig(
        bootstrap_servers=boot,
        group_id=group,
        input_topics=(src,),
        transactional_id=group,
        group_protocol="classic",
        **eosflow_settings(b),
    )
    app = eosflow.EosApp(Rows(dsn), config, observers=[Clock()])
    async with app:
        while not done:
            if app.failure is not None:
                raise app.failure
            await asyncio.sleep(0.005)
    return done[0] - first[0]


async def _loop(
    boot: str, src: str, n: int, group: str, b: Budget, write: Any, commit: Any
) -> float:
    """The hand-written loop: poll by the budget's rule, ``write`` the batch, ``commit``
    the database transaction, then the offsets to Kafka (at least once)."""
    consumer = AIOKafkaConsumer(
        src,
        bootstrap_servers=boot,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    await consumer.start()
    rule = TxnRule(b)
    first = end = 0.0
    total = 0
    try:
        while total < n:
            polled = await consumer.getmany(timeout_ms=IDLE_MS, max_records=rule.room())
            if not polled:
                continue
            first = first or time.monotonic()
            rule.begin()
            batch: list[Any] = []
            while polled:  # as _contenders.run_aiokafka's loop: until the rule ends it
                got = [m for ms in polled.values() for m in ms]
                batch += got
                rule.took(len(got), sum(len(m.value or b"") + len(m.key or b"") for m in got))
                if rule.full():
                    break
                wait_ms = round(rule.wait_s() * 1000)
                polled = await consumer.getmany(timeout_ms=wait_ms, max_records=rule.room())
            await write(batch)
            end = await commit()
            transactions[0] += 1
            total += len(batch)
            rule.end()
            await consumer.commit()  # after the rows: at least once
        return end - first
    finally:
        await consumer.stop()


async def run_asyncpg(
    boot: str, src: str, n: int, group: str, dsn: str, table: str, b: Budget
) -> float:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    tx: list[Any] = []

    async def write(batch: list[Any]) -> None:
        t = conn.transaction()
        await t.start()
        tx[:] = [t]
        rows = [(m.partition, m.offset, m.value) for m in batch]
        await conn.copy_records_to_table(table, records=rows, columns=COLUMNS)

    async def commit() -> float:
        await tx[0].commit()
        return time.monotonic()

    try:
        return await _loop(boot, src, n, group, b, write, commit)
    finally:
        await conn.close()


async def run_psycopg(
    boot: str, src: str, n: int, group: str, dsn: str, table: str, b: Budget
) -> float:
    import psycopg

    conn = await psycopg.AsyncConnection.connect(dsn)

    async def write(batch: list[Any]) -> None:
        async with conn.cursor() as cur:
            copy_sql = f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN (FORMAT BINARY)"
            async with cur.copy(copy_sql) as copy:
                copy.set_types(["int4", "int8", "bytea"])
                for m in batch:
                    await copy.write_row((m.partition, m.offset, m.value))

    async def commit() -> float:
        await conn.commit()
        return time.monotonic()

    try:
        return await _loop(boot, src, n, group, b, write, commit)
    finally:
        await conn.close()


RUNS = {"eosflow-sink": run_eosflow, "asyncpg-loop": run_asyncpg, "psycopg-loop": run_psycopg}


def main() -> None:
    name, boot, src, n, group, dsn, table = sys.argv[1:8]
    budget = Budget.from_argv(sys.argv[8:12])
    seconds = asyncio.run(RUNS[name](boot, src, int(n), group, dsn, table, budget))
    line = {"contender": name, "records": int(n), "seconds": seconds}
    line["transactions"] = transactions[0]  # database transactions committed
    print(json.dumps({**line, "rss_peak_mb": peak_rss_mb()}), flush=True)


if __name__ == "__main__":
    main()
