"""``expected_join`` (re-exported by ``eosflow.testing``): the row each record of a stream
should join in a table, computed from the two topics alone -- what a processor with an
``eosflow.Table`` sees when both topics hold their records before they are read.

Per partition number, the stream's and the table's records are merged as
``eosflow/_state/_sync.py`` merges them: the lower Kafka timestamp first among the two
partitions' next records, the table's on a tie, each partition in offset order; a table
record sets its key's row (a None value deletes it), a stream record joins its key's row
then. Use it to test a join: each output names its input record, and its row must be the
expected one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .._security import KafkaSecurity
from ._checker import read_records

Position = tuple[int, int]  # (partition, offset) of a stream record


def join_of(stream: Iterable[Any], table: Iterable[Any]) -> dict[Position, bytes | None]:
    """Each stream record's row (raw bytes, None: no row), by (partition, offset).
    ``stream`` and ``table``: records with ``partition``, ``offset``, ``timestamp``,
    ``key`` and ``value`` (aiokafka's or eosflow's)."""
    by_partition: dict[int, tuple[list[Any], list[Any]]] = {}
    for r in stream:
        by_partition.setdefault(r.partition, ([], []))[0].append(r)
    for r in table:
        by_partition.setdefault(r.partition, ([], []))[1].append(r)
    out: dict[Position, bytes | None] = {}
    for p, (records, rows) in by_partition.items():
        records.sort(key=lambda r: r.offset)
        rows.sort(key=lambda r: r.offset)
        latest: dict[bytes | None, bytes | None] = {}
        j = 0
        for r in records:
            while j < len(rows) and rows[j].timestamp <= r.timestamp:
                if rows[j].key is not None:
                    latest[rows[j].key] = rows[j].value
                j += 1
            out[(p, r.offset)] = latest.get(r.key)
    return out


async def expected_join(
    bootstrap: str, stream: str, table: str, *, security: KafkaSecurity | None = None
) -> dict[Position, bytes | None]:
    """``join_of`` the committed records of topics ``stream`` and ``table``, read now."""
    records = await read_records(bootstrap, stream, security=security)
    rows = await read_records(bootstrap, table, security=security)
    return join_of(records, rows)
