"""One join benchmark contender in its own process.

    python -m benchmarks._join_contenders NAME BOOTSTRAP ORDERS CUSTOMERS DST ORDER_COUNT \
        TOTAL INTERVAL GROUP STATE_DIR

NAME:
- ``eosflow-copy``: eosflow's pass-through of the orders alone (the reference), defaults;
- ``eosflow-copy-wide``: the same pass-through writing each order as ``order|order``: as
  many bytes as the join's output, without its table;
- ``eosflow-join``: each order joined with its customer's row as of its time
  (``eosflow.Table(CUSTOMERS, serde=eosflow.BYTES)``), the output's value the order's
  bytes, ``|``, the row's, as ``java/JoinRun.java`` writes it; defaults. TOTAL: the
  records it consumes in all (orders and rows);
- ``quixstreams-join``: quixstreams' as-of join (``join_asof``, inner: an order with its
  customer's latest row stamped at or before it), exactly-once, the same commit
  interval, its output as ``eosflow-join``'s; clocked to the group's committed offsets
  of the orders (``benchmarks._clock.Finish``). It takes the records as they are
  fetched, not in timestamp order across the two topics, so its check may show orders
  joined with another row;
- ``eosflow-table-restore``: a fresh join instance (its own transactional id, an empty
  local copy) joining the group after everything was consumed: it only restores every
  table partition from the topic; the time is from its start to every one ready.

Prints one JSON line: records (the orders), seconds (the first order processed to the
last commit; for the restore, start to ready), peak RSS (MiB); for eosflow's copies and
join, the process's CPU seconds over the same span.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._contenders import EXTRA, peak_rss_mb


def _config(boot: str, src: str, group: str, txn: str, state_dir: str, interval: float) -> Any:
    import eosflow

    return eosflow.EosConfig(
        bootstrap_servers=boot,
        group_id=group,
        input_topics=(src,),
        transactional_id=txn,
        commit_interval_s=interval,
        state_dir=state_dir,
    )


def _start(first: list[float]) -> None:
    """The first order's: the clock's start, and the process's CPU time then."""
    first.append(time.monotonic())
    EXTRA["cpu0"] = time.process_time()


def _join(customers: str, dst: str, first: list[float]) -> Any:
    import eosflow

    class Join(eosflow.Processor):
        tables = {"customers": eosflow.Table(customers, serde=eosflow.BYTES)}

        async def process(self, record: eosflow.Record) -> eosflow.Output | None:
            if not first:
                _start(first)
            row = self.table("customers").get(record.key or b"")
            if row is None:  # an inner join, as KStream.join
                return None
            return eosflow.Output(dst, (record.value or b"") + b"|" + row, key=record.key)

    return Join()


async def run(
    name: str, boot: str, orders: str, customers: str, dst: str, total: int, args: Any
) -> float:
    import eosflow

    first: list[float] = []

    class Copy(eosflow.Processor):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if not first:
                _start(first)
            return eosflow.Output(dst, record.value, key=record.key)

    class Wide(eosflow.Processor):
        async def process(self, record: eosflow.Record) -> eosflow.Output:
            if not first:
                _start(first)
            value = record.value or b""
            return eosflow.Output(dst, value + b"|" + value, key=record.key)

    processor: eosflow.Processor
    if name == "eosflow-join":
        processor = _join(customers, dst, first)
    else:
        processor = Wide() if name == "eosflow-copy-wide" else Copy()
    group, state_dir, interval = args
    app = eosflow.EosApp(processor, _config(boot, orders, group, group, state_dir, interval))
    async with app:
        while not (app.stats.records >= total and not app.in_transaction):
            if app.failure is not None:
                raise app.failure
            await asyncio.sleep(0.005)
        done = time.monotonic()
        EXTRA["cpu_s"] = time.process_time() - EXTRA.pop("cpu0")  # the process's, all threads
    return done - first[0]


def run_quixstreams(boot: str, orders: str, customers: str, dst: str, n: int, args: Any) -> float:
    from benchmarks._clock import Finish
    from benchmarks._state_contenders import quix_app

    group, state_dir, interval = args
    app = quix_app(boot, group, interval, state_dir)
    seen = [0]
    first: list[float] = []
    finish = Finish(boot, group, orders, n)

    def count(value: Any) -> None:
        if not first:
            first.append(time.monotonic())
        seen[0] += 1
        if seen[0] >= n:
            finish.begin()
            app.stop()  # graceful: the last checkpoint commits the last transaction

    def merge(order: str, row: str) -> str:
        return order + "|" + row

    # str values: its state store keeps the rows JSON-serialized, which bytes are not
    topic = {"value_deserializer": "str", "key_deserializer": "bytes"}
    left = app.dataframe(app.topic(orders, **topic)).update(count)
    right = app.dataframe(app.topic(customers, **topic))
    out = app.topic(dst, value_serializer="str", key_serializer="bytes")
    left.join_asof(right, how="inner", on_merge=merge).to_topic(out)
    app.run()
    return finish.at() - first[0]


async def restore(boot: str, orders: str, customers: str, dst: str, args: Any) -> float:
    """A fresh join instance of the group, timed until its table partitions are ready."""
    import eosflow

    ready: set[str] = set()
    restored: list[int] = []

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if msg.startswith(f"stores of {customers}[") and msg.endswith(" ready"):
                ready.add(msg)
            elif msg.startswith("restored table "):
                restored.append(int(msg.split(": ")[1].split()[0]))

    for logger in ("eosflow.session", "eosflow.state"):
        logging.getLogger(logger).addHandler(Watch())
        logging.getLogger(logger).setLevel(logging.INFO)
    group, state_dir, interval = args
    cfg = _config(boot, orders, group, f"{group}-restore", state_dir, interval)
    started = time.monotonic()
    app = eosflow.EosApp(_join(customers, dst, []), cfg)
    async with app:
        while True:
            tables = [p for p in app.assigned if p[0] == customers]
            if tables and len(ready) >= len(tables):
                break
            if app.failure is not None:
                raise app.failure
            await asyncio.sleep(0.005)
        took = time.monotonic() - started
    EXTRA["restored_records"] = sum(restored)
    return took


def main() -> None:
    name, boot, orders, customers, dst = sys.argv[1:6]
    n, total, interval = int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8])
    group, state_dir = sys.argv[9], sys.argv[10]
    Path(state_dir).mkdir(parents=True, exist_ok=True)
    args = (group, state_dir, interval)
    if name in ("eosflow-copy", "eosflow-copy-wide", "eosflow-join"):
        seconds = asyncio.run(run(name, boot, orders, customers, dst, total, args))
    elif name == "quixstreams-join":
        seconds = run_quixstreams(boot, orders, customers, dst, n, args)
    elif name == "eosflow-table-restore":
        seconds = asyncio.run(restore(boot, orders, customers, dst, args))
    else:
        raise SystemExit(f"unknown contender {name!r}")
    line = {"contender": name, "records": n, "seconds": seconds, "rss_peak_mb": peak_rss_mb()}
    print(json.dumps({**line, **EXTRA}), flush=True)


if __name__ == "__main__":
    main()
