"""``Processor.table(name)`` in ``process`` finds the record's partition's table itself
(a dict set for each record), and once ``Stores.idle`` says no record is in process --
the engine says so before anything else may run (``tests/state/test_tables.py``) --
finds none: the rows it reads are those of the record's partition number, whichever
record came before. The comment above each test names the mutations that made it fail."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from engines import entered
from kit import seat_for

import eosflow
from eosflow._state import Stores, state_settings
from eosflow._state._local import Env, LocalPartition


class _Join(eosflow.Processor):
    tables = {"rows": eosflow.Table("rows", serde=eosflow.BYTES)}

    async def process(self, record: eosflow.Record) -> eosflow.Output | None:
        row = self.table("rows").get(record.key or b"")
        return None if row is None else eosflow.Output("out", row, key=record.key)


class _JoinAndCount(_Join):
    stores = {"seen": eosflow.BYTES}

    async def process(self, record: eosflow.Record) -> eosflow.Output | None:
        self.state("seen").put(record.key or b"", b"1")
        return await super().process(record)


@contextlib.contextmanager
def held(
    tmp_path: Path,
    processor: eosflow.Processor,
    rows: Mapping[int, bytes],
    specs: Mapping[str, eosflow.Serde] | None = None,
) -> Iterator[Stores]:
    """``Stores`` holding ``rows`` and ``in`` partitions 0.. (``rows``: each partition's
    row of key ``k``, on disk), their local copies real and open; no Kafka."""
    cfg = eosflow.EosConfig(
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        input_topics=("in",),
        transactional_id="t",
        state_dir=str(tmp_path),
    )
    stores = Stores(
        state_settings(cfg), specs or {}, lambda p: None, lambda e: None, tables=processor.tables
    )
    env = Env()
    locals_ = []
    try:
        for p, row in rows.items():
            for part, names in ((("rows", p), ["rows"]), (("in", p), list(specs or ()))):
                stores._local[part] = local = LocalPartition(tmp_path, part, names, env)
                locals_.append(local)
                stores._held.add(part)
                stores._ready.add(part)
            stores._local[("rows", p)].apply({"rows": {b"k": row}}, {})
        yield stores
    finally:
        for local in locals_:
            local.close()


# Caught: the views not reset by idle (table() outside process answered the last
# record's partition), and the views set once for every record (the record of
# partition 1 joined partition 0's row).
def test_a_record_reads_its_partitions_table_and_none_outside_process(tmp_path: Path) -> None:
    processor = _Join()
    with (
        held(tmp_path, processor, {0: b"row of 0", 1: b"row of 1"}) as stores,
        seat_for(processor) as seat,
    ):
        process = entered(stores, stores.bind(seat, lambda r: r))
        stores.begin(adopted=False)
        got = []
        for p in (0, 1, 0, 1):
            out = asyncio.run(process(eosflow.Record("in", p, 0, b"k", b"v", (), 1)))
            got.append(out.value)
        assert got == [b"row of 0", b"row of 1", b"row of 0", b"row of 1"]
        stores.idle()
        with pytest.raises(RuntimeError, match="record in process"):
            processor.table("rows")


# A row is read wherever it is: in the open transaction (applied by a record of it), in
# the sealed one (the work done ahead while that commits), or on disk (committed), and
# a deleted row reads as absent there too. Caught: the open layer skipped, the sealed
# layer skipped (the order done ahead joined the row on disk, not the one committing).
def test_a_table_row_is_read_from_the_open_the_sealed_and_the_committed_writes(
    tmp_path: Path,
) -> None:
    processor = _Join()
    with held(tmp_path, processor, {0: b"on disk"}) as stores, seat_for(processor) as seat:
        process = entered(stores, stores.bind(seat, lambda r: r))

        async def step(topic: str, value: bytes | None) -> bytes | None:
            out = await process(eosflow.Record(topic, 0, 0, b"k", value, (), 1))
            stores.idle()
            return None if out is None else out.value

        async def run() -> list[bytes | None]:
            got = []
            stores.begin(adopted=False)
            got.append(await step("in", b"o"))  # on disk
            await step("rows", b"open")
            got.append(await step("in", b"o"))  # in the open transaction
            stores.seal()
            got.append(await step("in", b"o"))  # sealed, committing
            await step("rows", None)
            got.append(await step("in", b"o"))  # deleted ahead: absent
            return got

        assert asyncio.run(run()) == [b"on disk", b"open", b"open", None]


# With a store beside the table, idle takes the record's stores away too: state()
# outside process finds none. Caught: idle leaving the store handles in place.
def test_idle_takes_the_stores_away_beside_the_tables(tmp_path: Path) -> None:
    processor = _JoinAndCount()
    with (
        held(tmp_path, processor, {0: b"row"}, {"seen": eosflow.BYTES}) as stores,
        seat_for(processor) as seat,
    ):
        process = entered(stores, stores.bind(seat, lambda r: r))
        stores.begin(adopted=False)
        out = asyncio.run(process(eosflow.Record("in", 0, 0, b"k", b"v", (), 1)))
        assert out.value == b"row"
        assert processor.state("seen").get(b"k") == b"1"  # still set: the engine idles
        stores.idle()
        with pytest.raises(RuntimeError, match="record in process"):
            processor.state("seen")


class _Count(eosflow.Processor):
    stores = {"seen": eosflow.BYTES}

    async def process(self, record: eosflow.Record) -> None:
        self.state("seen").put(record.key or b"", b"1")


# A stateful app without tables: its records have no wrapper at all (the engine's loop
# enters each run, ``Stores.entering``), so the record's stores stay until idle takes
# them away; state() outside process then finds none. Caught: idle leaving the store
# handles in place.
def test_idle_takes_a_stateful_apps_stores_away(tmp_path: Path) -> None:
    processor = _Count()
    with (
        held(tmp_path, processor, {0: b"row"}, {"seen": eosflow.BYTES}) as stores,
        seat_for(processor) as seat,
    ):
        process = stores.bind(seat, lambda r: r)
        assert stores.entering is not None and process == processor.process
        stores.begin(adopted=False)
        stores.entering(("in", 0))  # as the engine's loop enters the run
        asyncio.run(process(eosflow.Record("in", 0, 0, b"k", b"v", (), 1)))
        assert processor.state("seen").get(b"k") == b"1"  # still set: the engine idles
        stores.idle()
        with pytest.raises(RuntimeError, match="record in process"):
            processor.state("seen")
