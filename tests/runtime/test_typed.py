"""Typed records end to end on the broker ladder's default: ``examples/typed_orders.py``
declares its topics (``Processor.topics``), reads models, keeps a model in a store and
writes models; a record that does not decode follows the error policy -- dead-lettered
as written, in the same transaction, with the field in its headers, or the app stops
naming it."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pydantic import BaseModel
from test_mechanisms import cfg, until

import eosflow
from eosflow.testing import FakeCluster
from examples.typed_orders import Doubled, Doubles, Order

N = 20
BAD, TOMBSTONE = 5, 9  # the record that does not validate, the one without a value


def value(i: int) -> bytes | None:
    if i == TOMBSTONE:
        return None
    if i == BAD:
        return json.dumps({"id": i, "qty": "many"}).encode()
    return json.dumps({"id": i, "qty": i}).encode()


async def seeded(c: FakeCluster) -> None:
    for topic in ("orders", "doubled", "dlq"):
        c.create_topic(topic, 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await p.start()
    try:
        for i in range(N):
            await p.send_and_wait("orders", value(i), key=f"c{i % 4}".encode(), partition=0)
    finally:
        await p.stop()


async def read(
    c: FakeCluster, topic: str
) -> list[tuple[bytes | None, bytes | None, dict[str, bytes]]]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=c.bootstrap_servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        got = await consumer.getmany(timeout_ms=2000)
        return [(r.key, r.value, dict(r.headers)) for rs in got.values() for r in rs]
    finally:
        await consumer.stop()


# With a dead-letter topic the record that does not validate goes there as written, with
# the field that failed, and the app goes on: every other record's model is written, the
# store of models read back, the tombstone skipped; it is counted as undecodable. Caught:
# the field's header left out; a tombstone handed to the model (dead-lettered too).
async def test_typed_records_with_a_bad_one_dead_lettered(cluster: FakeCluster) -> None:
    c = cluster
    await seeded(c)
    app = eosflow.EosApp(Doubles(), cfg(c, input_topics=("orders",), dead_letter_topic="dlq"))
    async with app:
        await until(app, lambda: sum(c.committed("g", "orders").values()) >= N, "all committed")
    dlq = await read(c, "dlq")
    assert [(k, v) for k, v, _ in dlq] == [(b"c1", value(BAD))]
    assert (app.stats.dead_lettered, app.stats.undecodable) == (1, 1)  # and in the metrics
    assert dlq[0][2]["eosflow.error.field"] == b"value.qty"
    assert dlq[0][2]["eosflow.error"].startswith(b"DecodeError: value.qty is not Order:")
    out = [(k, Doubled.model_validate_json(v or b"")) for k, v, _ in await read(c, "doubled")]
    want, last = [], {}
    for i in range(N):
        if i in (BAD, TOMBSTONE):
            continue
        key = f"c{i % 4}"
        want.append((key.encode(), Doubled(id=i, qty=2 * i, before=last.get(key, 0))))
        last[key] = i
    assert out == want


# Without one, the app stops at the record with one line naming it and the field, and
# commits nothing past it.
async def test_a_record_that_does_not_decode_stops_the_app_naming_it(cluster: FakeCluster) -> None:
    c = cluster
    await seeded(c)
    app = eosflow.EosApp(Doubles(), cfg(c, input_topics=("orders",)))
    said = r"^record did not decode on orders\[0\]@5: DecodeError: value.qty is not Order"
    with pytest.raises(eosflow.ProcessingError, match=said) as e:
        async with app:
            await until(app, lambda: False, "never", timeout_s=20)
    assert "\n" not in str(e.value)
    assert c.committed("g").get(("orders", 0), 0) <= BAD


# A processor that takes the whole transaction (process_batch) gets its typed records
# decoded too; one that does not decode is dead-lettered on its own, as written, and the
# batch goes on without it. Caught: the batch handed over as read (bytes, not models).
async def test_process_batch_takes_typed_records_and_dead_letters_the_undecodable(
    cluster: FakeCluster,
) -> None:
    class Batched(Doubles):
        async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
            return [
                eosflow.Output("doubled", Doubled(id=o.id, qty=2 * o.qty, before=0), key=r.key)
                for r in records
                if isinstance(o := r.value, Order)
            ]

    c = cluster
    await seeded(c)
    app = eosflow.EosApp(Batched(), cfg(c, input_topics=("orders",), dead_letter_topic="dlq"))
    async with app:
        await until(app, lambda: sum(c.committed("g", "orders").values()) >= N, "all committed")
    dlq = await read(c, "dlq")
    assert [(k, v) for k, v, _ in dlq] == [(b"c1", value(BAD))]
    assert dlq[0][2]["eosflow.error.field"] == b"value.qty"
    assert (app.stats.dead_lettered, app.stats.undecodable) == (1, 1)
    out = [Doubled.model_validate_json(v or b"").id for _k, v, _ in await read(c, "doubled")]
    assert out == [i for i in range(N) if i not in (BAD, TOMBSTONE)]


class Customer(BaseModel):
    tier: str


class Tiered(BaseModel):
    id: int
    tier: str | None


class WithTier(eosflow.Processor):
    """A typed table: each order with its customer's row, read as a ``Customer`` model."""

    topics = {"orders": eosflow.Topic(key=str, value=Order)}
    tables = {"customers": eosflow.Table("customers", serde=eosflow.Model(Customer))}

    async def process(self, record: eosflow.Record[str, Order]) -> eosflow.Output | None:
        if record.value is None:
            return None
        row = self.table("customers").get(record.key or "")
        assert row is None or isinstance(row, Customer)
        tier = None if row is None else row.tier
        return eosflow.Output("tiered", Tiered(id=record.value.id, tier=tier), key=record.key)


# A table's rows read as a model (``Table(serde=eosflow.Model(M))``), and a row that does
# not validate: the lookup raises, so the order that read it follows the error policy --
# dead-lettered -- and the others go on. Caught: the table's serde not applied (bytes
# handed to the processor: every order dead-lettered).
async def test_a_tables_rows_are_read_as_models(cluster: FakeCluster) -> None:
    c = cluster
    for topic in ("orders", "customers", "tiered", "dlq"):
        c.create_topic(topic, 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await p.start()
    try:
        rows = {"c0": {"tier": "gold"}, "c1": {"tier": 3}, "c2": {"tier": "bronze"}}
        for key, row in rows.items():  # c1's row does not validate
            await p.send_and_wait("customers", json.dumps(row).encode(), key=key.encode())
        for i in range(8):
            order = json.dumps({"id": i, "qty": i}).encode()
            await p.send_and_wait("orders", order, key=f"c{i % 4}".encode())
    finally:
        await p.stop()
    app = eosflow.EosApp(WithTier(), cfg(c, input_topics=("orders",), dead_letter_topic="dlq"))
    async with app:
        await until(app, lambda: sum(c.committed("g", "orders").values()) >= 8, "all committed")
    out = [Tiered.model_validate_json(v or b"") for _k, v, _h in await read(c, "tiered")]
    tiers = {"c0": "gold", "c2": "bronze", "c3": None}
    assert out == [Tiered(id=i, tier=tiers[f"c{i % 4}"]) for i in range(8) if i % 4 != 1]
    dead = await read(c, "dlq")
    assert [k for k, _v, _h in dead] == [b"c1", b"c1"]
    assert b"tier" in dead[0][2]["eosflow.error"]


class Mixed(eosflow.Processor):
    """Each record's ``Output`` on the per-record path: a model for its declared topic,
    the wrong model there for order 3, and a ``str`` and a model for undeclared topics."""

    topics = {
        "orders": eosflow.Topic(key=str, value=Order),
        "doubled": eosflow.Topic(value=Doubled),
    }

    async def process(self, record: eosflow.Record[str, Order]) -> eosflow.Output | None:
        order = record.value
        if order is None:
            return None
        if order.id == 3:
            return eosflow.Output("doubled", order, key=record.key)  # not a Doubled
        if order.id % 3 == 1:
            return eosflow.Output("notes", f"order {order.id}", key=record.key)  # undeclared
        if order.id % 3 == 2:
            return eosflow.Output("notes", order, key=record.key)  # undeclared: its JSON
        return eosflow.Output("doubled", Doubled(id=order.id, qty=2 * order.qty, before=0))


# An Output of objects returned by process is encoded on the engine's per-record path
# (``Typing.encode``): a declared topic by its model, an undeclared one's str as UTF-8
# and model as its JSON; the wrong model for a declared topic dead-letters its record
# naming the topic and both models, and the app goes on. Caught: the per-record branch
# appending the Output unencoded (the producer refuses the model: the app stops).
async def test_outputs_of_objects_are_encoded_or_dead_letter_their_record(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await seeded(c)
    c.create_topic("notes", 1)
    app = eosflow.EosApp(Mixed(), cfg(c, input_topics=("orders",), dead_letter_topic="dlq"))
    async with app:
        await until(app, lambda: sum(c.committed("g", "orders").values()) >= N, "all committed")
    dlq = await read(c, "dlq")
    assert [(k, v) for k, v, _ in dlq] == [(b"c3", value(3)), (b"c1", value(BAD))]
    said = dlq[0][2]["eosflow.error"]
    assert said == b"TypeError: Output for doubled: Order given where Doubled is taken"
    ok = [i for i in range(N) if i not in (3, BAD, TOMBSTONE)]
    doubled = [Doubled.model_validate_json(v or b"") for _k, v, _h in await read(c, "doubled")]
    assert doubled == [Doubled(id=i, qty=2 * i, before=0) for i in ok if i % 3 == 0]
    notes = [(k, v) for k, v, _h in await read(c, "notes")]
    text = {1: lambda i: f"order {i}", 2: lambda i: Order(id=i, qty=i).model_dump_json()}
    assert notes == [(f"c{i % 4}".encode(), text[i % 3](i).encode()) for i in ok if i % 3]
