"""Global tables (``eosflow.GlobalTable``): a topic read whole by every instance, looked
up by any key. Read to its end before the first record, kept current while running,
resumed from its checkpoints after a restart. The comment above each test names the
mutation that made it fail when the mechanism was taken out."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from kit import T0_MS, create_topic, eventually, session_of
from stateful import state_config, until_committed
from test_tables import produce

import eosflow
from eosflow._checks._checker import read_records
from eosflow.testing._ladder import Broker


def catalogue(topic: str, out: str) -> eosflow.Processor:
    """Each order (keyed by customer, naming a product) with its product's row."""

    class Catalogue(eosflow.Processor):
        tables: ClassVar[Mapping[str, eosflow.Table | eosflow.GlobalTable]] = {
            "products": eosflow.GlobalTable(topic)
        }

        async def process(self, record: eosflow.Record) -> eosflow.Output:
            order = json.loads(record.value or b"{}")
            order["row"] = self.table("products").get(order["product"])
            return eosflow.Output(out, json.dumps(order), key=record.key)

    return Catalogue()


def orders(first: int, count: int, products: int) -> list[tuple[int, bytes, int, bytes]]:
    """Orders keyed by customer, over 3 partitions, each naming a product."""
    return [
        (
            i % 3,
            b"c%d" % (i % 7),
            T0_MS + 1000 + i,
            json.dumps({"id": i, "product": f"p{i % products}"}).encode(),
        )
        for i in range(first, first + count)
    ]


def rows(version: int, products: int) -> list[tuple[int, bytes, int, bytes]]:
    """Version ``version`` of every product's row, over the table's 2 partitions."""
    return [
        (i % 2, f"p{i}".encode(), T0_MS + 1, json.dumps({"v": version}).encode())
        for i in range(products)
    ]


async def joined(b: Broker, out: str) -> dict[int, Any]:
    got: dict[int, Any] = {}
    for r in await read_records(b.bootstrap_servers, out):
        value = json.loads(r.value)
        assert value["id"] not in got, f"order {value['id']} twice"
        got[value["id"]] = value["row"]
    return got


# Rows written before the app starts are all there for its first record; a row written
# while it runs is applied by the global tables' task (no order needed to bring it in);
# a restart reads only what came since its checkpoints, and its first orders see it.
# A global table needs no co-partitioning: 2 partitions against the orders' 3. Caught:
# no read to the end at start (the first orders joined no row); no checkpoints (the
# restart read every row again).
async def test_a_global_table_is_read_before_the_first_record_and_kept_current(
    eosflow_broker: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    b = eosflow_broker
    src, products, out, group = (
        b.unique("orders"),
        b.unique("products"),
        b.unique("out"),
        b.unique("g"),
    )
    await create_topic(b.bootstrap_servers, src, 3)
    await create_topic(b.bootstrap_servers, out, 3)
    await create_topic(b.bootstrap_servers, products, 2)
    await produce(b.bootstrap_servers, products, rows(1, 20))
    await produce(b.bootstrap_servers, src, orders(0, 60, 20))
    cfg = state_config(b.bootstrap_servers, group, src, b.unique("tx"), tmp_path)
    if b.cluster is not None:  # the table's fetches slow: the orders must wait for it
        slow = {"delay_s": 0.5, "client_id": f"{cfg.client_id}-global", "times": 4}
        b.cluster.intercept("Fetch", **slow)
    app = eosflow.EosApp(catalogue(products, out), cfg)
    async with app:
        await until_committed(b.bootstrap_servers, src, 3, group, 60, (app,))
        await produce(b.bootstrap_servers, products, [(1, b"p1", T0_MS + 2, b'{"v": 2}')])

        async def applied() -> bool:
            s = session_of(app)
            store = None if s is None else s.stores.globals.store("products")
            return store is not None and store.get("p1") == {"v": 2}

        await eventually(applied, timeout_s=20, what="the row applied while running")
        await produce(
            b.bootstrap_servers, src, [(0, b"c0", T0_MS + 5000, b'{"id": 1000, "product": "p1"}')]
        )
        await until_committed(b.bootstrap_servers, src, 3, group, 61, (app,))
    got = await joined(b, out)
    assert all(got[i] == {"v": 1} for i in range(60)), got
    assert got[1000] == {"v": 2}

    await produce(b.bootstrap_servers, products, rows(3, 20))
    await produce(b.bootstrap_servers, src, orders(60, 30, 20))
    caplog.set_level(logging.INFO, logger="eosflow.state")
    app = eosflow.EosApp(catalogue(products, out), cfg)
    async with app:
        await until_committed(b.bootstrap_servers, src, 3, group, 91, (app,))
    got = await joined(b, out)
    assert all(got[i] == {"v": 3} for i in range(60, 90)), got
    read = [r.getMessage() for r in caplog.records if r.getMessage().startswith("global tables")]
    assert read and read[-1].startswith("global tables ['products'] read: 20 records"), read


class BothKinds(eosflow.Processor):
    tables: ClassVar[Mapping[str, eosflow.Table | eosflow.GlobalTable]] = {
        "a": eosflow.Table("t"),
        "b": eosflow.GlobalTable("t"),
    }


# A global table of the topic of another table, or of an input topic: one line.
def test_a_global_table_of_a_taken_topic_is_one_line(tmp_path: Path) -> None:
    from eosflow._state import declared_tables

    with pytest.raises(eosflow.ConfigError, match="both read topic 't'"):
        declared_tables(BothKinds())
    with pytest.raises(eosflow.ConfigError, match="is an input topic too"):
        declared_tables(catalogue("in", "out"), ("in",))
