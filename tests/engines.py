"""An app's real ``Engine`` and ``Stores`` without a broker, for tests of the per-record
loop (``Engine._process``): the engine ``EosApp`` builds, the stores of the partitions
asked for held and open over RocksDB local copies, a transaction begun; and a run of
records through it, seated as the app runs."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import eosflow
from eosflow._app import EosApp
from eosflow._engine._work import Work
from eosflow._state import seated
from eosflow._state._local import Env, LocalPartition


def engine_of(
    tmp_path: Path,
    processor: eosflow.Processor | eosflow.Pipeline,
    inputs: tuple[str, ...] = ("orders",),
    partitions: Iterable[tuple[str, int]] | None = None,
    **cfg: Any,
) -> tuple[Any, Any]:
    """``(app, engine)`` of ``processor`` reading ``inputs``, ``partitions`` held (by
    default partition 0 of every topic the app consumes)."""
    config = eosflow.EosConfig(
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        input_topics=inputs,
        transactional_id="t",
        state_dir=str(tmp_path),
        **cfg,
    )
    app = EosApp(processor, config)
    engine = app._new_runtime()
    stores = engine.session.stores
    held = [(t, 0) for t in app.config.input_topics] if partitions is None else partitions
    for p in held:
        stores._local[p] = LocalPartition(tmp_path, p, stores.names(p[0]), Env())
        stores._held.add(p)
        stores._ready.add(p)
    stores.begin(adopted=False)
    return app, engine


def run(app: Any, engine: Any, records: list[eosflow.Record]) -> Work:
    """``records`` through ``engine``'s loop in one call, seated; the copies closed."""

    async def go() -> Work:
        work = Work()
        with seated(app._seat):
            await engine._process(records, work, float("inf"))
        return work

    try:
        return asyncio.run(go())
    finally:
        for local in engine.session.stores._local.values():
            local.close()


def entered(stores: Any, process: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Any]:
    """``process`` as ``stores.bind`` gave it, each record's partition entered first when
    the stores ask for it (``Stores.entering``), as the engine's loop enters each run of
    one partition's records -- the record then taken by what entering returned, if
    anything (a join's table row) -- for tests that call ``process`` by hand."""
    enter = stores.entering
    if enter is None:
        return process

    def each(record: Any) -> Awaitable[Any]:
        run = enter((record.topic, record.partition))
        return (process if run is None else run)(record)

    return each
