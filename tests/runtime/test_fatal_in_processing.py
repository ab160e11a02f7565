"""A ``FatalError`` raised while processing stops the app as itself, dead-letter topic or
not: the record is not at fault (a schema registry that stopped answering, a sink that
cannot go on), so dead-lettering it would divert good records. One test per place a
processor's code runs: ``process``, ``process_batch``, a wall-clock timer's ``fire``.
Each caught the mutation of its path's ``except (TransactionError, FatalError)`` back to
``except TransactionError`` (the record or timer dead-lettered, the app going on)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from test_mechanisms import cfg, seed

import eosflow
from eosflow._checks._checker import read_records
from eosflow.testing import FakeCluster


class Stops(eosflow.Processor):
    async def process(self, record: eosflow.Record) -> eosflow.Output:
        raise eosflow.FatalError("the registry is gone")


class StopsInBatch(eosflow.Processor):
    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        raise eosflow.FatalError("the registry is gone")


class StopsInFire(eosflow.Processor):
    async def process(self, record: eosflow.Record) -> None:
        self.timers.after(0.01, record.key or b"k", b"")

    async def fire(self, timer: eosflow.Timer) -> eosflow.Output:
        raise eosflow.FatalError("the registry is gone")


@pytest.mark.parametrize("proc", [Stops, StopsInBatch, StopsInFire])
async def test_a_fatal_error_stops_the_app_even_with_a_dead_letter_topic(
    cluster: FakeCluster, tmp_path: Path, proc: type[eosflow.Processor]
) -> None:
    c = cluster
    await seed(c, n=10)
    c.create_topic("dlq", 1)
    app = eosflow.EosApp(proc(), cfg(c, dead_letter_topic="dlq", state_dir=str(tmp_path)))
    with pytest.raises(eosflow.FatalError, match="the registry is gone"):
        await asyncio.wait_for(app.run(), 30)
    assert await read_records(c.bootstrap_servers, "dlq") == []
    assert sum(c.committed("g", "in").values()) == 0
