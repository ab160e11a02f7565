"""A pipeline with a ``process_batch`` stage (``Staged.routed_batch``): orders regrouped
by product record by record, then tallied per product a transaction at a time -- a
running total in a store and orders per minute of event time in a window, both merged
through ``self.batch`` -- in one app and one transaction per instance. The Spark form
of such a stage is in ``tests/spark/test_spark_stage.py``."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from kit import T0_MS, create_topic, eventually
from stateful import live_orders
from test_pipeline import by_product_then, config, product_of

import eosflow
from eosflow._checks._checker import read_records
from eosflow.testing._ladder import Broker

SPACING_MS = 100  # order i at T0 + i * 100 ms: 600 orders a minute


def plus(old: int | None, n: int) -> int:
    return (old or 0) + n


class BatchTally(eosflow.Processor):
    """Per product, a transaction at a time: its running total (emitted after each
    batch) and its orders per minute of event time (each minute's final once). Its
    ``fail_on``-th batch raises ``TransactionError`` (aborted, retried smaller)."""

    stores = {"totals": eosflow.JSON}
    windows = {"minutes": eosflow.Tumbling(size_s=60, grace_s=0)}

    def __init__(self, totals: str, minutes: str, fail_on: int = 0) -> None:
        self.totals, self.minutes, self.fail_on = totals, minutes, fail_on
        self.batches = 0

    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        self.batches += 1
        if self.batches == self.fail_on:
            raise eosflow.TransactionError("once, with regrouped records in the batch")
        batch = self.batch
        for i, start in batch.windows("minutes"):
            r = records[i]
            batch.merge("minutes", (r.topic, r.partition), r.key or b"", 1, plus, start_ms=start)
        per_key = Counter((r.topic, r.partition, r.key or b"") for r in records)
        return [
            eosflow.Output(self.totals, str(batch.merge("totals", (t, p), key, n, plus)), key=key)
            for (t, p, key), n in sorted(per_key.items())
        ]

    async def closed(self, key: bytes, window: eosflow.Window, value: int) -> eosflow.Output:
        minute = (window.start_ms - T0_MS) // 60_000
        return eosflow.Output(self.minutes, json.dumps([minute, value]), key=key)


# Every transaction mixes orders and regrouped orders (at most 100 records each), so the
# batch stage gets part of the transaction's records. Caught: the stage handed the whole
# transaction's BatchState (its windows' indices are then the transaction's, not its
# records': "none of the batch's records is in it", the app stops); the record stage's
# Regroup without the order's event time (no minute closes: stream time is the
# producer's clock); the routed outputs of the record stage dropped (nothing regrouped).
async def test_a_batch_stage_after_the_regroup_tallies_per_new_key_exactly_once(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    b = eosflow_broker
    src, group = b.unique("orders"), b.unique("tally")
    totals, minutes = b.unique("totals"), b.unique("minutes")
    # one partition of orders: regrouped from several, a product's orders would reach its
    # partition out of event-time order, and a window without grace would drop some late
    await create_topic(b.bootstrap_servers, src, 1)
    for topic in (totals, minutes):
        await create_topic(b.bootstrap_servers, topic, 2)
    n = 1_500  # 150 s of event time: minutes 0 and 1 close
    tally = BatchTally(totals, minutes, fail_on=6)
    cfg = config(b.bootstrap_servers, group, src, b.unique("tx"), tmp_path, max_records_per_txn=100)
    app = eosflow.EosApp(by_product_then(src, tally), cfg)
    wanted = Counter(product_of(i).encode() for i in range(n))

    async def counted() -> bool:
        assert app.failure is None, app.failure
        last: dict[bytes, int] = {}
        for r in await read_records(b.bootstrap_servers, totals, committed_only=True):
            assert r.key is not None and r.value is not None
            last[r.key] = max(last.get(r.key, 0), int(r.value))
        return last == dict(wanted)

    async with app:
        # orders arrive as the app runs, so its transactions hold orders and regrouped
        # orders together, in either order
        await live_orders(b.bootstrap_servers, src, n, product_of, SPACING_MS, 25, 0.02)
        await eventually(counted, timeout_s=90, what="every product's total reached")
        assert app.stats.aborted >= 1  # the failing batch's transaction, retried
    # each product's totals rise strictly, in the order committed: no batch twice
    seen: dict[bytes, list[int]] = defaultdict(list)
    outputs = await read_records(b.bootstrap_servers, totals, committed_only=True)
    for r in sorted(outputs, key=lambda r: (r.partition, r.offset)):
        assert r.key is not None and r.value is not None
        seen[r.key].append(int(r.value))
    for key, values in seen.items():
        assert values == sorted(set(values)) and values[-1] == wanted[key], (key, values)
    finals = sorted(
        (r.key, *json.loads(r.value or b"null"))
        for r in await read_records(b.bootstrap_servers, minutes, committed_only=True)
    )
    per_minute = Counter(
        (product_of(i).encode(), i * SPACING_MS // 60_000) for i in range(n) if i < 1_200
    )
    assert finals == sorted((k, m, c) for (k, m), c in per_minute.items())
