"""Folded output topics (``eosflow.Topic(fold=True)``): of a key's outputs in one
transaction only the last is written, at the transaction's end (``TransactSession.
send_all`` holds them, ``end`` sends them before its flush). Each transaction holds
exactly 100 records here (a cap of 100, the commit interval and the minimum transaction
at 2 s), so which outputs are due is known from the input alone. The comment above each
test names the mutation it caught."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from test_mechanisms import cfg, until

import eosflow
from eosflow._checks._checker import read_records
from eosflow._protocol import _codes as codes
from eosflow._typed import Typing
from eosflow.testing import FakeCluster

N, KEYS, PER_TXN = 200, 5, 100


class LastOffset(eosflow.Processor):
    """Each record's offset under its key, to a folded topic; keyless records beside."""

    topics = {"out": eosflow.Topic(fold=True)}

    def __init__(self, keyless: bool = True) -> None:
        self.keyless = keyless

    async def process(self, record: eosflow.Record) -> list[eosflow.Output]:
        out = [eosflow.Output("out", str(record.offset).encode(), key=record.key)]
        if self.keyless and record.offset % 50 == 0:  # no key: never folded
            out.append(eosflow.Output("out", b"keyless-%d" % record.offset))
        return out


async def _seed(c: FakeCluster) -> None:
    c.create_topic("in", 1)
    c.create_topic("out", 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await p.start()
    try:
        sent = [await p.send("in", b"v", key=b"k%d" % (i % KEYS), partition=0) for i in range(N)]
        await asyncio.gather(*sent)
    finally:
        await p.stop()


def _due(keyless: bool = True) -> list[tuple[bytes | None, bytes]]:
    """Per transaction (offsets 0-99, 100-199), each key's last offset; the keyless."""
    due: list[tuple[bytes | None, bytes]] = []
    for lo in range(0, N, PER_TXN):
        last = {b"k%d" % (i % KEYS): i for i in range(lo, lo + PER_TXN)}
        due += [(k, str(i).encode()) for k, i in last.items()]
    due += [(None, b"keyless-%d" % i) for i in range(0, N, 50) if keyless]
    return sorted(due, key=repr)


async def _run(c: FakeCluster, keyless: bool = True) -> eosflow.EosApp:
    config = cfg(c, max_records_per_txn=PER_TXN, commit_interval_s=2.0, min_transaction_s=2.0)
    app = eosflow.EosApp(LastOffset(keyless), config)
    async with app:
        await until(app, lambda: sum(c.committed("g", "in").values()) == N, "all committed")
    return app


# Two transactions of 100 records over 5 keys: 5 outputs each, the last of each key,
# and the keyless ones as they came. Caught: the declaration ignored (200 keyed outputs).
async def test_a_folded_topic_gets_each_keys_last_output_per_transaction(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await _seed(c)
    app = await _run(c)
    got = sorted(
        ((r.key, r.value) for r in await read_records(c.bootstrap_servers, "out")), key=repr
    )
    assert got == _due()
    assert app.stats.outputs == len(_due()) and app.stats.committed == 2, app.stats


# The held outputs' Produce (the transaction's only one: no keyless output) fails: the
# transaction aborts (the producer recovered), is redone, and the outputs due are there
# once -- none of the failed attempt's.
async def test_a_failed_send_of_held_outputs_aborts_and_is_redone(cluster: FakeCluster) -> None:
    c = cluster
    await _seed(c)
    rule = c.intercept("Produce", error=codes.UNKNOWN_SERVER_ERROR)  # once
    app = await _run(c, keyless=False)
    assert rule.hits == 1
    got = sorted(
        ((r.key, r.value) for r in await read_records(c.bootstrap_servers, "out")), key=repr
    )
    assert got == _due(keyless=False)
    assert app.stats.aborted + app.stats.recovered >= 1, app.stats


class BadPartition(LastOffset):
    """One output, held with the rest, names a partition ``out`` has not."""

    async def process(self, record: eosflow.Record) -> list[eosflow.Output]:
        out = await super().process(record)
        if record.offset == 42:
            out.append(eosflow.Output("out", b"x", key=b"bad", partition=7))
        return out


# A held output that can never be produced (a partition the topic has not) aborts the
# transaction before it stops the app: nothing of it committed, neither outputs nor
# offsets. Caught: the held send's refusal not made the transaction's (it committed
# its offsets without that output, then the app stopped).
async def test_a_held_output_that_cannot_be_produced_aborts_then_stops(
    cluster: FakeCluster,
) -> None:
    c = cluster
    await _seed(c)
    config = cfg(c, max_records_per_txn=PER_TXN, commit_interval_s=2.0, min_transaction_s=2.0)
    app = eosflow.EosApp(BadPartition(keyless=False), config)
    with pytest.raises(eosflow.FatalError, match=r"names out\[7\]"):
        async with app:
            await until(app, lambda: False, "the app's stop", timeout_s=20)
    assert sum(c.committed("g", "in").values()) == 0
    assert await read_records(c.bootstrap_servers, "out") == []


@pytest.mark.parametrize(
    ("topics", "said"),
    [
        ({"in": eosflow.Topic(fold=True)}, r"topics\['in'\]: fold is for topics the app writes"),
        ({"out": eosflow.Topic(fold=1)}, r"topics\['out'\].fold is 1: expected True or False"),  # type: ignore[arg-type]
    ],
)
def test_a_wrong_fold_is_one_line(topics: dict[str, eosflow.Topic], said: str) -> None:
    with pytest.raises(eosflow.ConfigError, match=said):
        Typing("Shop", topics, ("in",))
