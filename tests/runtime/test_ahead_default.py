"""``process_ahead``'s default (``EosConfig.process_ahead=None``): on where the app keeps
state, off for a stateless one; a value given wins either way (``_engine/_cycle.py``).

With EndTxn held, an app working ahead processes the next transaction's 50 records while
the first commit waits; one that does not stays at the first 50. Then every record is
processed once and output once. Make the default ignore the app's state and the stateful
case fails (50 seen); make it on for every app and the stateless one fails (100 seen)."""

from __future__ import annotations

import asyncio

import pytest
from fleet import seed
from kit import app_config, eventually, read_all
from stateful import Counting

import eosflow
from eosflow.testing import FakeCluster

N = 200
TXN = 50  # records per transaction


class Copy(eosflow.Processor):
    """Pass-through that records every offset it processes."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        self.seen.append(record.offset)
        return eosflow.Output("out", record.value, key=record.key)


class CountingCopy(Counting, Copy):
    """The same, keeping a count per key: an app with state."""


@pytest.mark.parametrize(
    ("processor", "setting", "ahead"),
    [
        (CountingCopy, None, True),  # state: ahead by default
        (Copy, None, False),  # stateless: not
        (CountingCopy, False, False),  # given: as given
        (Copy, True, True),
    ],
)
async def test_the_default_works_ahead_where_the_app_keeps_state(
    cluster: FakeCluster, processor: type[Copy], setting: bool | None, ahead: bool
) -> None:
    c = cluster
    c.create_topic("in", 1)
    c.create_topic("out", 1)
    await seed(c.bootstrap_servers, "in", N)
    proc = processor()
    held = c.intercept("EndTxn", hold=True)
    config = app_config(
        c,
        max_records_per_txn=TXN,
        process_ahead=setting,
        group_protocol="classic",
        transactions_v2="off",
    )
    app = eosflow.EosApp(proc, config)

    async def seen(n: int) -> bool:
        assert app.failure is None, app.failure
        return len(proc.seen) >= n

    async with app:
        await held.matched()
        if ahead:
            await eventually(lambda: seen(2 * TXN), what="a transaction's records done ahead")
        # a window in which nothing more may happen: the next transaction cannot begin
        await asyncio.sleep(0.5)
        assert c.txns.txns["tx-1"].state == "Ongoing", "EndTxn is still held"
        assert sorted(proc.seen) == list(range(2 * TXN if ahead else TXN))
        held.release()

        async def done() -> bool:
            assert app.failure is None, app.failure
            return sum(c.committed("g", "in").values()) == N

        await eventually(done, what="every record committed")
    assert sorted(proc.seen) == list(range(N)), "each record processed once"
    values = [v for _, _, v in await read_all(c.bootstrap_servers, "out")]
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(N))  # type: ignore[type-var]
