"""The producer's batch size limit (``_engine/_sizing.batch_bytes``): 1,000,000 bytes where
the app works ahead and its config leaves ``max_batch_bytes`` unset, else the config's
(256 KiB by default). The test cluster keeps every Produce request it answers; the
largest batch of the app's outputs says which limit its producer had.

Caught: the limit kept at the config's whatever the app (a stateful app's largest batch
at 256 KiB: ``[state-default]`` and ``[ahead-given]`` fail); the larger limit for every
app (``[stateless-default]`` fails); a limit the config gives not kept
(``[state-given]`` fails)."""

from __future__ import annotations

from typing import Any

import pytest
from fleet import seed
from kit import app_config, eventually, read_all
from stateful import Counting

import eosflow
from eosflow._engine._sizing import AHEAD_BATCH_BYTES
from eosflow.testing import FakeCluster

N = 3000
SIZE = 1000  # bytes of each output's value: 3 MB in all, on one partition
DEFAULT = 256 * 1024


class Copy(eosflow.Processor):
    """Each record out as a value of ``SIZE`` bytes."""

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        return eosflow.Output("out", (record.value or b"").ljust(SIZE, b"."), key=record.key)


class CountingCopy(Counting, Copy):
    """The same, keeping a count: an app with state, which works ahead by default."""


def _largest_batch(bodies: list[dict[str, Any]], topic: str) -> int:
    return max(
        len(p["messages"] or b"")
        for body in bodies
        for t in body["topics"]
        if t["topic"] == topic
        for p in t["partitions"]
    )


@pytest.mark.parametrize(
    ("processor", "given", "limit"),
    [
        pytest.param(CountingCopy, {}, AHEAD_BATCH_BYTES, id="state-default"),
        pytest.param(Copy, {}, DEFAULT, id="stateless-default"),
        pytest.param(CountingCopy, {"max_batch_bytes": DEFAULT}, DEFAULT, id="state-given"),
        pytest.param(Copy, {"process_ahead": True}, AHEAD_BATCH_BYTES, id="ahead-given"),
    ],
)
async def test_an_app_working_ahead_produces_larger_batches(
    cluster: FakeCluster, processor: type[Copy], given: dict[str, Any], limit: int
) -> None:
    c = cluster
    c.create_topic("in", 1)
    c.create_topic("out", 1)
    await seed(c.bootstrap_servers, "in", N)
    produced = c.intercept("Produce", times=None, transactional_id="tx-1")  # only recorded
    app = eosflow.EosApp(processor(), app_config(c, **given))
    try:
        async with app:

            async def done() -> bool:
                assert app.failure is None, app.failure
                return sum(c.committed("g", "in").values()) == N

            await eventually(done, timeout_s=60, what="every record committed")
    finally:
        c.remove_fault(produced)
    largest = _largest_batch(produced.bodies, "out")
    assert largest <= limit
    if limit > DEFAULT:  # the outputs of one poll fill batches past the default
        assert largest > DEFAULT, f"the largest batch held {largest:,} bytes"
    values = [v for _, _, v in await read_all(c.bootstrap_servers, "out")]
    assert sorted(values) == sorted(f"v{i}".encode().ljust(SIZE, b".") for i in range(N))  # type: ignore[type-var]
