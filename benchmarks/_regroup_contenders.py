"""One regroup benchmark contender in its own process.

    python -m benchmarks._regroup_contenders NAME BOOTSTRAP SRC DST RECORDS INTERVAL GROUP STATE_DIR

Every contender counts the input's records by a new key -- the value's bytes before its
first ``|`` (``new_key``) -- so each must move every record to the partition of its new
key first, through a repartition topic, and count it there:

- ``eosflow-regroup``: a ``Pipeline`` of two stages, as ``examples/regroup.py`` writes one:
  ``by-product`` returns ``Regroup(new key, the value)``; ``count`` keeps a running count
  per new key in a JSON store and emits each new count (the key, the count as text).
  Default settings but the commit interval. The regrouped records, the counts, their
  changelog and both topics' offsets commit in one transaction per commit.
- ``eosflow-regroup-fold``: the same with the counts' topic declared
  ``eosflow.Topic(fold=True)``: each transaction writes a key's last count only, as
  Kafka Streams' record cache does.
- ``quixstreams-regroup``: quixstreams 3, exactly-once, ``group_by(new_key, name=
  "by-product")`` (bytes in and out) then the state benchmark's count
  (``apply(stateful=True)``), each new count emitted.

(Kafka Streams' ``groupBy(...).count()`` is ``java/RegroupCount.java``; the single-stage
count by the input's key, the regroup's price, is ``_state_contenders``' ``eosflow-count``.)

The clock runs from the first input record taken to the last count committed: eosflow's
once its app has processed every input and every regrouped record (twice RECORDS) and no
transaction is open; quixstreams' at its graceful stop after the RECORDS-th count (its
last checkpoint commits). Prints one JSON line: records, seconds, peak RSS (MiB) and the
RSS once a tenth was processed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._contenders import EXTRA, peak_rss_mb, phases
from benchmarks._state_contenders import quix_app

STAGE = "by-product"


def new_key(value: bytes) -> bytes:
    """The value's bytes before its first ``|`` (all of it without one)."""
    cut = value.find(b"|")
    return value if cut < 0 else value[:cut]


async def run_eosflow(
    boot: str,
    src: str,
    dst: str,
    n: int,
    interval: float,
    group: str,
    state_dir: str,
    fold: bool = False,
) -> float:
    import eosflow

    first: list[float] = []

    class ByProduct(eosflow.Processor):
        async def process(self, record: eosflow.Record) -> eosflow.Regroup:
            if not first:
                first.append(time.monotonic())
                EXTRA["cpu0"] = time.process_time()
            value = record.value or b""
            return eosflow.Regroup(key=new_key(value), value=value)

    class Count(eosflow.Processor):
        stores = {"counts": eosflow.JSON}
        topics = {dst: eosflow.Topic(fold=True)} if fold else {}

        async def process(self, record: eosflow.Record) -> eosflow.Output:
            counts = self.state("counts")
            key = record.key or b""
            c = counts.get(key, 0) + 1
            counts.put(key, c)
            return eosflow.Output(dst, str(c).encode(), key=key)

    class Regrouped(eosflow.Pipeline):
        stages = {
            STAGE: eosflow.Stage(ByProduct(), inputs=(src,)),
            "count": eosflow.Stage(Count(), inputs=(STAGE,)),
        }

    config = eosflow.EosConfig(
        bootstrap_servers=boot,
        group_id=group,
        input_topics=(src,),
        transactional_id=group,
        commit_interval_s=interval,
        state_dir=state_dir,
    )

    app = eosflow.EosApp(Regrouped(), config, observers=[phases()])
    async with app:
        while not (app.stats.records >= 2 * n and not app.in_transaction):
            if app.failure is not None:
                raise app.failure
            if "rss_tenth_mb" not in EXTRA and app.stats.records >= n // 5:
                EXTRA["rss_tenth_mb"] = peak_rss_mb("VmRSS")
            await asyncio.sleep(0.005)
        done = time.monotonic()
        EXTRA["cpu_s"] = time.process_time() - EXTRA.pop("cpu0")
    EXTRA["commits"] = app.stats.committed
    return done - first[0]


def run_quixstreams(
    boot: str, src: str, dst: str, n: int, interval: float, group: str, state_dir: str
) -> float:
    app = quix_app(boot, group, interval, state_dir)
    first: list[float] = []
    counted = [0]
    t_in = app.topic(src, value_deserializer="bytes", key_deserializer="bytes")
    t_out = app.topic(dst, value_serializer="bytes", key_serializer="bytes")

    def taken(value: Any) -> None:
        if not first:
            first.append(time.monotonic())  # the clock starts at the input, as eosflow's

    def count(value: Any, state: Any) -> bytes:
        c = state.get("count", 0) + 1
        state.set("count", c)
        counted[0] += 1
        if counted[0] == n // 10:
            EXTRA["rss_tenth_mb"] = peak_rss_mb("VmRSS")
        if counted[0] >= n:
            app.stop()  # graceful: its last checkpoint commits the last counts
        return str(c).encode()

    sdf = app.dataframe(t_in).update(taken)
    sdf = sdf.group_by(
        lambda value: new_key(value),
        name=STAGE,
        value_deserializer="bytes",
        key_deserializer="bytes",
        value_serializer="bytes",
        key_serializer="bytes",
    )
    sdf.apply(count, stateful=True).to_topic(t_out)
    app.run()
    return time.monotonic() - first[0]


def main() -> None:
    name, boot, src, dst = sys.argv[1:5]
    n, interval, group, state_dir = int(sys.argv[5]), float(sys.argv[6]), sys.argv[7], sys.argv[8]
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    if name in ("eosflow-regroup", "eosflow-regroup-fold"):
        fold = name.endswith("-fold")
        seconds = asyncio.run(run_eosflow(boot, src, dst, n, interval, group, state_dir, fold))
    elif name == "quixstreams-regroup":
        seconds = run_quixstreams(boot, src, dst, n, interval, group, state_dir)
    else:
        raise SystemExit(f"unknown contender {name!r}")
    line = {"contender": name, "records": n, "seconds": seconds, "rss_peak_mb": peak_rss_mb()}
    print(json.dumps({**line, **EXTRA}), flush=True)


if __name__ == "__main__":
    main()
