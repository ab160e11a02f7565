"""``GET /state/<store>/<key>`` on the operations port: a store's committed value, read
from the local copies of the partitions an instance holds. The comment above each test
names the mutation that made it fail when the mechanism was taken out."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from stateful import produce_at, seed_keys, state_config, until_committed
from test_metrics import get

import eosflow
from eosflow.testing import FakeCluster
from examples.counting import Count


class Holding(Count):
    """``examples/counting.py``, but the record of key ``hold`` waits, after its count
    is written, until ``release`` is set: its transaction stays open meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        out = await super().process(record)
        if record.key == b"hold":
            self.holding.set()
            await self.release.wait()
        return out


async def ask(app: eosflow.EosApp, path: str) -> tuple[int, Any]:
    port = app.ops.port
    assert port is not None
    status, body = await asyncio.to_thread(get, port, path)
    return status, json.loads(body)


# A key's committed count, from the partition that holds it; while a transaction that
# raised it is open, the answer stays the committed one, and moves once it commits.
# An unknown store or key answers 404 in one line. Caught: reading through the
# open transaction's layers (the held record's count answered before its commit).
async def test_a_query_answers_the_committed_value_only(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    src = "in"
    c.create_topic(src, 2)
    c.create_topic(f"{src}-counts", 2)
    await seed_keys(c.bootstrap_servers, src, 60, 6)
    proc = Holding()
    ops = {"metrics_port": 0, "progress_interval_s": 0}
    cfg = state_config(c.bootstrap_servers, "g", src, "tx-1", tmp_path, ops=ops)
    app = eosflow.EosApp(proc, cfg)
    async with app:
        await until_committed(c.bootstrap_servers, src, 2, "g", 60, (app,))
        status, body = await ask(app, "/state/counts/k1")
        assert status == 200 and body["store"] == "counts" and body["key"] == "k1"
        assert [v["value"] for v in body["values"]] == [10]
        assert body["values"][0]["topic"] == src
        # one more k1, then a record that holds its transaction open
        await seed_keys(c.bootstrap_servers, src, 1, 6, start=1)
        await until_committed(c.bootstrap_servers, src, 2, "g", 61, (app,))
        await produce_at(c.bootstrap_servers, src, [(0, b"hold", 1000)], b"v")
        await asyncio.wait_for(proc.holding.wait(), 30)
        try:
            status, body = await ask(app, "/state/counts/hold")
        finally:  # a failing assertion must not leave the transaction (and the app) hanging
            proc.release.set()
        assert status == 404 and "not in store 'counts'" in body["error"]
        await until_committed(c.bootstrap_servers, src, 2, "g", 62, (app,))
        status, body = await ask(app, "/state/counts/hold")
        assert status == 200 and [v["value"] for v in body["values"]] == [1]
        assert (await ask(app, "/state/counts/k1"))[1]["values"][0]["value"] == 11
        status, body = await ask(app, "/state/nope/k1")
        assert (
            status == 404 and body["error"] == "no store 'nope'; the processor declares ['counts']"
        )
        status, body = await ask(app, "/state/counts/")  # the empty key: none here
        assert status == 404 and "key '' is not in store 'counts'" in body["error"]
        status, body = await ask(app, "/state/counts/nobody%20here")
        assert status == 404 and "'nobody here'" in body["error"]
        assert "in[0], in[1]" in body["error"]
