"""A stateful app's records run without a wrapper of their own: the engine's compiled
loop enters each run of one partition's records (``Stores.entering``, ``_native.drive``)
and ``Stores.idle`` leaves it. A real ``Engine`` and ``Stores`` over RocksDB local
copies, fed records by ``Engine._process``; no broker. The comment above each test
names the mutations that made it fail."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from engines import engine_of, run

import eosflow


class Where(eosflow.Processor):
    """Counts per key; each output names the partition of the store it counted in."""

    stores: Any = {"n": eosflow.JSON}

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        counts = self.state("n")
        if record.value == b"suspend":
            await asyncio.sleep(0)  # other tasks run: the next record is entered again
        n = counts.get(record.key, 0) + 1
        counts.put(record.key, n)
        topic, p = counts.partition
        return eosflow.Output("out", b"%s[%d]=%d" % (topic.encode(), p, n), key=record.key)


# Runs of three partitions of two topics interleaved in one call, some records
# suspending (the loop hands back, the engine finishes them and calls again): every
# record counted in its own partition's store, each key's count rising by one. Caught:
# the run entered on a topic change only (a partition's records counted in another's
# store); ``entering`` not set (every record refused: no store open).
def test_each_run_is_counted_in_its_own_partitions_store(tmp_path: Path) -> None:
    parts = [("a", 0), ("a", 1), ("b", 0)]
    app, engine = engine_of(tmp_path, Where(), inputs=("a", "b"), partitions=parts)
    rng = random.Random(5)
    records, want = [], []
    offsets = dict.fromkeys(parts, 0)
    counts: dict[tuple[str, int, bytes], int] = {}
    while len(records) < 400:
        topic, p = rng.choice(parts)
        for _ in range(rng.randrange(1, 8)):
            key = b"k%d" % rng.randrange(3)  # the same keys in every partition
            value = b"suspend" if rng.random() < 0.05 else b"v"
            records.append(eosflow.Record(topic, p, offsets[(topic, p)], key, value, (), 1))
            offsets[(topic, p)] += 1
            n = counts[(topic, p, key)] = counts.get((topic, p, key), 0) + 1
            want.append(b"%s[%d]=%d" % (topic.encode(), p, n))

    work = run(app, engine, records)
    assert [o.value for o in work.outputs] == want
    assert work.offsets == {p: offsets[p] for p in parts}
    assert engine.session.stores.current is None  # idle: no record in process once the loop ends
