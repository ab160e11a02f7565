"""``eosflow produce`` and ``eosflow consume`` (issue 51.4), on the ladder's broker: lines
in with keys, headers, JSON fields and a tombstone, the same records out; only committed
records are shown (an open transaction's are not); ``--from end`` shows only new ones."""

from __future__ import annotations

import asyncio
import io
import json

from aiokafka import AIOKafkaProducer
from kit import create_topic

import eosflow
from eosflow._ops._topic_io import Endpoint, consume, produce
from eosflow.testing._ladder import Broker


def _lines(*lines: str):  # type: ignore[no-untyped-def]
    pending = [f"{line}\n" for line in lines]

    async def read_line() -> str:
        return pending.pop(0) if pending else ""

    return read_line


async def _consumed(where: Endpoint, topic: str, **kw: object) -> list[dict[str, object]]:
    out = io.StringIO()
    await consume(where, topic, out, asyncio.Event(), json_lines=True, **kw)  # type: ignore[arg-type]
    return [json.loads(line) for line in out.getvalue().splitlines()]


async def test_records_in_and_out(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    where = Endpoint(b.bootstrap_servers, eosflow.KafkaSecurity())
    topic = b.unique("io")
    await create_topic(b.bootstrap_servers, topic, 2)
    plain = await produce(
        where, topic, _lines("k1:one", "no key here", ""), key_separator=":", headers=[("h", b"v")]
    )
    assert plain == 2  # the empty line is no record
    objects = [
        {"key": "k2", "value": {"n": 2}, "partition": 1, "timestamp_ms": 1767225600000},
        {"key": "k3", "value": None, "partition": 1, "headers": {"why": "gone"}},
    ]
    assert await produce(where, topic, _lines(*map(json.dumps, objects)), json_lines=True) == 2

    # an open transaction's record is not shown (read_committed)
    txn = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers, transactional_id=b.unique("t"))
    await txn.start()
    try:
        await txn.begin_transaction()
        await txn.send_and_wait(topic, b"uncommitted", partition=0)
        got = await _consumed(where, topic, idle_s=1.5)
        await txn.abort_transaction()
    finally:
        await txn.stop()
    assert all(r["value"] != "uncommitted" for r in got), got
    by_key = {r["key"]: r for r in got}
    assert by_key["k1"]["value"] == "one" and by_key["k1"]["headers"] == {"h": "v"}
    assert by_key[None]["value"] == "no key here"
    assert by_key["k2"] | {"offset": 0} == {
        "partition": 1,
        "offset": 0,
        "timestamp_ms": 1767225600000,
        "key": "k2",
        "value": '{"n": 2}',
        "headers": {},
    }
    assert by_key["k3"]["value"] is None and by_key["k3"]["headers"] == {"why": "gone"}

    # --from end: only what comes after; --count ends it
    later = asyncio.create_task(_consumed(where, topic, from_end=True, count=1))
    await asyncio.sleep(1.0)
    await produce(where, topic, _lines("new"))
    assert [r["value"] for r in await asyncio.wait_for(later, 30)] == ["new"]
