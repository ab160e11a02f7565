"""``eosflow demo --regroup``: orders keyed by customer, counted per product per minute
of event time, in one app of two stages, under the demo's SIGKILL.

Stage ``by-product`` regroups each order under its product (``Regroup``) through the
repartition topic eosflow makes (``demo-regroup--by-product--repartition``, the
order's timestamp kept); stage ``per-minute`` counts each product's orders per minute
of event time and emits each minute's final once, when it closes (``MINUTE``: 3 min of
grace). The orders are produced while the instances run, ``PACE_PER_S`` a second, as
a live source writes them: a minute's orders then reach the counting stage close to
each other in time, whatever instance regroups them.

What a crash does to the order is not up to the input: an instance killed holds its
partitions' orders back for seconds, while the others' move the counting stage's
stream time on. An order whose minute had closed when it arrived is late: it goes to
the dead-letter topic ``orders-late`` in its transaction (``LateRecord``). So the check
holds whatever the timing: for every product and minute, one final, and its count plus
that minute's late orders is exactly that minute's orders in the input. After the
orders, one closing order per partition of the repartition topic, an hour of event time
later, closes every minute before it (their own minutes stay open and are not checked).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

from aiokafka import AIOKafkaProducer

from .. import _aiokafka as ak
from .._ops import group_status
from .._processor import Processor
from .._records import Output, Record, Regroup
from .._stages import Pipeline, Stage
from .._state import Tumbling, Window
from ..testing import read_topic

GROUP, OUT, LATE = "demo-regroup", "orders-per-product-minute", "orders-late"
PRODUCTS = 31
PACE_PER_S = 2_000  # orders produced a second: 20 s of event time (10 ms apart)
MINUTE = Tumbling(size_s=60, grace_s=180)
CLOSING_AFTER_MS = 3_600_000  # the closing orders' event time, past the last order


def product_of(order_id: int) -> str:
    return f"p{order_id % PRODUCTS}"


class ByProduct(Processor):
    """An order, keyed by its product."""

    async def process(self, record: Record) -> Regroup:
        product = json.loads(record.value or b"{}")["product"]
        return Regroup(key=product, value=record.value)


class MinuteCounts(Processor):
    """Records per key per minute of event time (``window``: a one-minute tumbling
    window), each minute's final emitted once, when it closes, to ``output`` as JSON
    ``{"start_ms", "end_ms", "value"}``. The regroup demo's count per product; the
    windows demo's per customer (``_pipeline.OrdersPerMinute``)."""

    def __init__(self, window: Tumbling = MINUTE, output: str = OUT) -> None:
        self.windows = {"minutes": window}
        self.output = output

    async def process(self, record: Record) -> None:
        self.window("minutes").update(record.key or b"", _plus_one, 0)

    async def closed(self, key: bytes, window: Window, value: Any) -> Output:
        final = {"start_ms": window.start_ms, "end_ms": window.end_ms, "value": value}
        return Output(self.output, json.dumps(final), key=key)


def _plus_one(n: int) -> int:
    return n + 1


class OrdersPerProduct(Pipeline):
    """``by-product`` (the orders regrouped by product), then ``per-minute``."""

    def __init__(self) -> None:
        self.stages = {
            "by-product": Stage(ByProduct(), inputs=("orders",)),
            "per-minute": Stage(MinuteCounts(), inputs=("by-product",)),
        }


async def seed_closing(
    bootstrap: str, topic: str, first_id: int, last_ms: int, partitions: int
) -> None:
    """One order per partition of the repartition topic (a product the default
    partitioner puts there), ``CLOSING_AFTER_MS`` after ``last_ms``: every minute
    before it closes. Ids from ``first_id``; ``closing`` marks them."""
    products: dict[int, str] = {}
    n = 0
    while len(products) < partitions:
        product = f"closing-{n}"
        products.setdefault(ak.default_partition(product.encode(), partitions), product)
        n += 1
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for k, product in enumerate(products.values()):
            order = {"id": first_id + k, "product": product, "closing": True}
            await producer.send_and_wait(
                topic,
                json.dumps(order).encode(),
                key=product.encode(),
                timestamp_ms=last_ms + CLOSING_AFTER_MS,
            )
    finally:
        await producer.stop()


async def drained(bootstrap: str, group: str, timeout_s: float = 60.0) -> None:
    """Wait until ``group`` has read the repartition topic to its end (``eosflow
    status``'s lag 0 on each partition: nothing readable past its committed offset):
    the counting stage counted every regrouped order."""
    topic = f"{group}--by-product--repartition"
    deadline = time.monotonic() + timeout_s
    while True:
        rows = [p for p in (await group_status(bootstrap, group)).partitions if p.topic == topic]
        if rows and all(p.lag == 0 for p in rows):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} not read to its end within {timeout_s:g} s")
        await asyncio.sleep(0.1)  # polling the group's offsets


async def check(bootstrap: str, t0_ms: int, every_ms: int, records: int) -> bool:
    """Every product's minutes: one final each, whose count plus the minute's late
    orders (dead-lettered) is the minute's orders; no final of a closing order's."""
    size_ms = round(MINUTE.size_s * 1000)
    want: Counter[tuple[str, int]] = Counter()
    for i in range(records):
        at = t0_ms + i * every_ms
        want[(product_of(i), at - at % size_ms)] += 1
    finals: Counter[tuple[str, int]] = Counter()
    counted: Counter[tuple[str, int]] = Counter()
    for _p, _o, key, value in await read_topic(bootstrap, OUT):
        final = json.loads(value or b"{}")
        slot = ((key or b"").decode(), int(final["start_ms"]))
        finals[slot] += 1
        counted[slot] += int(final["value"])
    late: Counter[tuple[str, int]] = Counter()
    for _p, _o, _k, value in await read_topic(bootstrap, LATE):
        order = json.loads(value or b"{}")
        at = t0_ms + int(order["id"]) * every_ms
        late[(str(order["product"]), at - at % size_ms)] += 1
    twice = sum(n > 1 for n in finals.values())
    missing = len(want.keys() - finals.keys())
    stray = len(finals.keys() - want.keys())
    wrong = sum(counted[s] + late[s] != n for s, n in want.items() if s in finals)
    ok = not (twice or missing or stray or wrong) and len(want) > 0
    verdict = (
        "OK"
        if ok
        else f"FAILED ({twice} twice, {missing} missing, {stray} stray, {wrong} wrong counts)"
    )
    print(
        f"regroup: {len(want)} product-minutes from {records} orders keyed by customer; "
        f"each final once, its count plus its late orders ({sum(late.values())} "
        f"dead-lettered) the minute's orders: {verdict}",
        flush=True,
    )
    return ok
