"""``eosflow demo --typed``: orders in Avro through a genuine schema registry, validated
into a model, one bad order dead-lettered, under the demo's SIGKILL.

The test kit's registry (``eosflow.testing.SchemaRegistry``: Apicurio Registry, built
once with Maven, needs Java 17) runs on 127.0.0.1 for the demo's length. The orders are
written in the Confluent wire format with ``Order``'s Avro schema, order ``BAD`` with a
negative amount -- valid Avro, refused by the model's ``amount >= 0`` -- and
``TypedEnrich`` reads ``Order`` models and writes ``EnrichedOrder`` ones. The check
reads both topics back through the registry: every good order once in
``orders-enriched-typed`` with its enrichment, the bad one alone in ``orders-dlq`` as
written, with the field that failed (``value.amount``) in its headers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel, Field

from .._processor import Processor
from .._records import Output, Record
from .._schemas import Avro, Registry, SchemaCodec, SchemaRegistrySettings
from .._typed import Topic
from ..testing import read_topic

IN, OUT, DLQ = "orders", "orders-enriched-typed", "orders-dlq"
BAD = 7  # the order written with a negative amount


class Order(BaseModel):
    id: int
    customer: str
    amount: int = Field(ge=0)


class EnrichedOrder(BaseModel):
    id: int
    customer: str
    amount: int
    band: str
    amount_with_tax: float


class TypedEnrich(Processor):
    """``Enrich`` on models: a price band and the amount with tax, the key kept."""

    topics = {
        IN: Topic(key=str, value=Avro(Order)),
        OUT: Topic(key=str, value=Avro(EnrichedOrder)),
    }

    async def process(self, record: Record[str, Order]) -> Output | None:
        o = record.value
        if o is None:
            return None
        band = "large" if o.amount >= 500 else "small"
        enriched = EnrichedOrder(
            **o.model_dump(), band=band, amount_with_tax=round(o.amount * 1.2, 2)
        )
        return Output(OUT, enriched, key=record.key)


async def codecs(url: str) -> tuple[Registry, SchemaCodec, SchemaCodec]:
    """The registry's client, the orders' codec (its schema registered: the seeding
    writes with it) and the outputs' (reading only)."""
    registry = Registry(SchemaRegistrySettings(url=url))
    orders = Avro(Order).bind(registry, f"{IN}-value", "the demo's orders")
    await orders.prepare(output=True)
    enriched = Avro(EnrichedOrder).bind(registry, f"{OUT}-value", "the demo's outputs")
    return registry, orders, enriched


def encoder(orders: SchemaCodec) -> Any:
    """The seeding's value of an order: its Avro with the registry's header; order
    ``BAD`` with a negative amount (Avro takes it, the model does not)."""

    def encode(order: dict[str, Any]) -> bytes:
        if order["id"] == BAD:
            order = {**order, "amount": -1}
        return orders.dumps(Order.model_construct(**order))

    return encode


async def check(bootstrap: str, enriched: SchemaCodec, records: int) -> bool:
    """Every good order once, enriched, in ``OUT``; the bad one alone in ``DLQ``."""
    seen: Counter[int] = Counter()
    wrong = 0
    for _p, _o, key, value in await read_topic(bootstrap, OUT):
        order = await _decoded(enriched, value or b"")
        seen[order.id] += 1
        band = "large" if order.amount >= 500 else "small"
        wrong += key != f"order-{order.id}".encode() or order.band != band
    dead = await read_topic(bootstrap, DLQ)
    want = set(range(records)) - {BAD}
    twice = sum(n > 1 for n in seen.values())
    missing = len(want - seen.keys())
    stray = len(seen.keys() - want)
    dead_ok = [k for _p, _o, k, _v in dead] == [f"order-{BAD}".encode()]
    ok = not (twice or missing or stray or wrong) and dead_ok
    verdict = (
        "OK"
        if ok
        else (
            f"FAILED ({twice} twice, {missing} missing, {stray} stray, {wrong} wrong, "
            f"{len(dead)} dead-lettered)"
        )
    )
    print(
        f"typed: {sum(seen.values())} Avro orders decoded through the registry, each good "
        f"order once; order {BAD} (amount -1) dead-lettered as written, alone: {verdict}",
        flush=True,
    )
    return ok


async def _decoded(codec: SchemaCodec, value: bytes) -> EnrichedOrder:
    from .._schemas import NeedsSchema

    try:
        return codec.loads(value)  # type: ignore[no-any-return]
    except NeedsSchema as need:
        await need.fetch()
        return codec.loads(value)  # type: ignore[no-any-return]
