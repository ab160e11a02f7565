"""Helpers shared by the tests: topic set-up, complete reads and polling, on any broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

import eosflow
from eosflow._engine._session import TransactSession
from eosflow._protocol import _codes as codes
from eosflow._protocol import _specs
from eosflow._state import Seat, seated
from eosflow.testing import read_topic
from eosflow.testing._ladder import Broker

# Where the tests' record timestamps start: this day's first ms (UTC), so windows of any
# size dividing a day line up as they would from 0. Never 1970's ms 0: a genuine broker
# deletes a log whose records are all older than its retention.ms (7 days) at its next
# retention check -- 30 s after it starts, then every 5 minutes -- and the test cluster
# does at its (every second): the input would be gone mid-test.
T0_MS = int(time.time() // 86_400) * 86_400_000

# what genuine Kafka answers a group request while a fresh offsets partition loads
_LOADING = (
    codes.COORDINATOR_LOAD_IN_PROGRESS,
    codes.COORDINATOR_NOT_AVAILABLE,
    codes.NOT_COORDINATOR,
)


def session_of(app: eosflow.EosApp) -> TransactSession | None:
    """The app's ``TransactSession``, once its engine runs (None before)."""
    engine = app._runtime
    return None if engine is None else engine.session


@contextlib.contextmanager
def seat_for(processor: eosflow.Processor) -> Iterator[Seat]:
    """A seat for ``processor`` outside an app, as ``EosApp.run`` gives one (``_seat``):
    bind the runtime's pieces to it; the processor finds them inside the block."""
    with seated(Seat(processor, eosflow.Observer())) as seat:
        yield seat


def app_config(c: Any, **kw: Any) -> eosflow.EosConfig:
    """An app's config on ``c`` (a cluster or a ladder broker) as the tests run it: group
    ``g``, input ``in``, transactional id ``tx-1``, short timings (a 10 s session, 0.3 s
    heartbeats, 8 s transactions) and no progress line; ``kw`` replaces any of it."""
    base: dict[str, Any] = dict(
        bootstrap_servers=c.bootstrap_servers,
        group_id="g",
        input_topics=("in",),
        transactional_id="tx-1",
        session_timeout_s=10.0,
        heartbeat_interval_s=0.3,
        transaction_timeout_s=8.0,
        ops={"progress_interval_s": 0},
    )
    return eosflow.EosConfig(**(base | kw))


class Gate(eosflow.Processor):
    """Pass-through that can park on a record until the test opens the gate."""

    def __init__(self, out: str, park_at: int | None = None) -> None:
        self.out = out
        self.park_at = park_at
        self.parked = asyncio.Event()
        self.gate = asyncio.Event()
        self.revoked_at: list[float] = []

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        if record.offset == self.park_at and not self.gate.is_set():
            self.parked.set()
            await self.gate.wait()
        return eosflow.Output(self.out, record.value, key=record.key)

    async def on_revoked(self, partitions: frozenset[tuple[str, int]]) -> None:
        self.revoked_at.append(time.monotonic())


async def lso_reached_end(bootstrap: str, topic: str) -> bool:
    """Whether no transaction is open on ``topic``'s partition 0: its last stable offset
    (what a read_committed consumer sees as the end) equals its high watermark."""
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            ends.append((await c.end_offsets([tp]))[tp])
        finally:
            await c.stop()
    return ends[0] == ends[1]


class Upper(eosflow.Processor):
    """Upper-cases each value into ``out``, keeping the key; with ``dlq_every`` N, a
    record whose key is a multiple of N raises instead (for the dead-letter policy)."""

    def __init__(self, out: str, dlq_every: int = 0) -> None:
        self.out, self.dlq_every = out, dlq_every

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        assert record.value is not None
        if self.dlq_every and int(record.key or b"0") % self.dlq_every == 0:
            raise ValueError("to the dead-letter topic")
        return eosflow.Output(self.out, record.value.upper(), key=record.key)


async def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    replication: int = 1,
    configs: dict[str, str] | None = None,
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, replication, topic_configs=configs)])
    finally:
        await admin.close()


async def read_all(
    bootstrap: str, topic: str, *, committed_only: bool = True
) -> list[tuple[int, int, bytes | None]]:
    """Every record of ``topic`` up to its current end, as (partition, offset, value)."""
    records = await read_topic(bootstrap, topic, committed_only=committed_only)
    return [(p, o, v) for p, o, _k, v in records]


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout_s: float = 20.0, what: str = "condition"
) -> None:
    """Poll ``check`` until it holds (for broker-side timers whose period differs
    between brokers), failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout_s} s")
        await asyncio.sleep(0.05)


class LogSeen(logging.Handler):
    """``event`` is set once ``logger`` emits a record whose message starts with
    ``prefix``: a test waits on what the code under test says it did, not on a sleep."""

    def __init__(self, prefix: str) -> None:
        super().__init__(logging.DEBUG)
        self.prefix, self.event = prefix, asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.prefix):
            self.event.set()


@contextlib.contextmanager
def log_seen(logger: str, prefix: str) -> Iterator[asyncio.Event]:
    """Watch ``logger`` for a message starting with ``prefix`` while the block runs."""
    seen, log = LogSeen(prefix), logging.getLogger(logger)
    level = log.level
    log.addHandler(seen)
    if not log.isEnabledFor(logging.DEBUG):
        log.setLevel(logging.DEBUG)
    try:
        yield seen.event
    finally:
        log.removeHandler(seen)
        log.setLevel(level)


class RawGroup:
    """Drives the classic group protocol by hand (JoinGroup, SyncGroup, Heartbeat,
    OffsetCommit), to test the broker's group rules directly, on any broker."""

    def __init__(self, bootstrap: str, group: str, client_id: str = "raw-group") -> None:
        from aiokafka.client import AIOKafkaClient

        self.client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id=client_id)
        self.group = group
        self.node: int | None = None

    async def start(self) -> None:
        await self.client.bootstrap()
        await self._find_coordinator()

    async def _find_coordinator(self, timeout_s: float = 30.0) -> None:
        """FindCoordinator, retried as clients do while genuine Kafka answers
        COORDINATOR_NOT_AVAILABLE (its __consumer_offsets being created)."""
        from aiokafka.errors import KafkaError

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.node = await self.client.coordinator_lookup(0, self.group)
                return
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def close(self) -> None:
        await self.client.close()

    async def _send(self, spec: object, body: dict[str, object]) -> dict[str, object]:
        from aiokafka.client import ConnectionGroup

        from eosflow._protocol import _wire

        deadline = time.monotonic() + 30.0
        while True:
            assert self.node is not None
            req = _wire.SpecRequest.of(spec, body)  # type: ignore[arg-type]
            resp = await self.client.send(self.node, req, group=ConnectionGroup.COORDINATION)
            answer: dict[str, object] = resp.to_object()
            if answer.get("error_code") not in _LOADING or time.monotonic() > deadline:
                return answer
            await asyncio.sleep(0.05)
            await self._find_coordinator()

    async def join(
        self,
        member_id: str = "",
        instance_id: str | None = None,
        session_ms: int = 10000,
        rebalance_ms: int = 10000,
        protocol: tuple[str, bytes] = ("range", b""),
    ) -> dict[str, object]:
        """JoinGroup v5, answering MEMBER_ID_REQUIRED once as clients do; ``protocol``:
        the one assignor offered and its metadata (a consumer's subscription)."""

        body: dict[str, object] = {
            "group": self.group,
            "session_timeout": session_ms,
            "rebalance_timeout": rebalance_ms,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "protocol_type": "consumer",
            "group_protocols": [{"protocol_name": protocol[0], "protocol_metadata": protocol[1]}],
        }
        resp = await self._send(_specs.JOIN_GROUP, body)
        if resp["error_code"] == codes.MEMBER_ID_REQUIRED:
            body["member_id"] = resp["member_id"]
            resp = await self._send(_specs.JOIN_GROUP, body)
        return resp

    async def sync(
        self,
        generation: int,
        member_id: str,
        instance_id: str | None = None,
        assignments: dict[str, bytes] | None = None,
    ) -> dict[str, object]:

        return await self._send(
            _specs.SYNC_GROUP,
            {
                "group": self.group,
                "generation_id": generation,
                "member_id": member_id,
                "group_instance_id": instance_id,
                "group_assignment": [
                    {"member_id": m, "member_metadata": a} for m, a in (assignments or {}).items()
                ],
            },
        )

    async def heartbeat(
        self, generation: int, member_id: str, instance_id: str | None = None
    ) -> int:

        resp = await self._send(
            _specs.HEARTBEAT,
            {
                "group_id": self.group,
                "generation_id": generation,
                "member_id": member_id,
                "group_instance_id": instance_id,
            },
        )
        return int(resp["error_code"])  # type: ignore[call-overload]

    async def commit(self, generation: int, member_id: str, topic: str, offset: int) -> int:
        from aiokafka.client import ConnectionGroup
        from aiokafka.protocol.commit import OffsetCommitRequest

        assert self.node is not None
        req = OffsetCommitRequest(
            self.group, generation, member_id, -1, [(topic, [(0, offset, "")])]
        )
        resp = await self.client.send(self.node, req, group=ConnectionGroup.COORDINATION)
        return int(resp.topics[0][1][0][1])


async def broker_versions(bootstrap: str) -> dict[int, int]:
    """The newest version of each API key the broker speaks, from its ApiVersions answer."""
    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.admin import ApiVersionRequest

    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        resp = await client.send(client.get_random_node(), ApiVersionRequest())
    finally:
        await client.close()
    return {key: hi for key, _lo, hi in resp.api_versions}


async def broker_has_kip447(bootstrap: str) -> bool:
    """Whether the broker speaks KIP-447 (TxnOffsetCommit v3 and OffsetFetch v7)."""
    top = await broker_versions(bootstrap)
    return top.get(28, -1) >= 3 and top.get(9, -1) >= 7


async def broker_caps(bootstrap: str) -> Any:
    """What the broker speaks (``_aiokafka.capabilities``: ApiVersions and the cluster's
    finalized features)."""
    from aiokafka import AIOKafkaProducer

    from eosflow import _aiokafka as ak

    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        return await ak.capabilities(p)
    finally:
        await p.stop()


@contextlib.asynccontextmanager
async def client_needing(bootstrap: str, capability: str, what: str) -> AsyncIterator[Any]:
    """An aiokafka client on the broker, the test skipped unless the broker has
    ``capability`` (a ``Capabilities`` property, e.g. "kip848"; ``what`` names it)."""
    from aiokafka import AIOKafkaProducer

    from eosflow import _aiokafka as ak

    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        caps = await ak.capabilities(p)
        if not getattr(caps, capability):
            pytest.skip(f"the broker lacks {what} ({caps.describe()})")
        yield p.client
    finally:
        await p.stop()


async def broker_has_kip848(bootstrap: str) -> bool:
    """Whether the broker speaks the consumer group protocol (KIP-848): API 68 and the
    cluster's finalized ``group.version`` >= 1."""
    return bool((await broker_caps(bootstrap)).kip848)


async def broker_has_txn_v2(bootstrap: str) -> bool:
    """Whether the cluster has transactions v2 (KIP-890 part 2: ``transaction.version``
    >= 2 finalized, EndTxn v5, Produce v12, TxnOffsetCommit v5)."""
    return bool((await broker_caps(bootstrap)).txn_v2)


async def broker_has_kip360(bootstrap: str) -> bool:
    """Whether the broker re-initialises a producer's epoch (InitProducerId v3, KIP-360)."""
    return (await broker_versions(bootstrap)).get(22, -1) >= 3


class RawConn:
    """One connection sending requests of pinned versions, encoded with the test
    cluster's codec tables (aiokafka's structs and eosflow's specs) and decoded to dicts:
    to compare brokers' answers field by field. ``send`` answers None when the broker
    closed the connection instead of answering (reopened for the next request)."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self.host, self.port, self.corr = host, int(port), 0
        self._r: asyncio.StreamReader | None = None
        self._w: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        self._r, self._w = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        if self._w is not None:
            self._w.close()

    def frame(self, key: int, version: int, body: dict[str, Any]) -> bytes:
        import struct

        from eosflow._protocol import _wire
        from eosflow.testing._codec import REGISTRY

        req = REGISTRY[(key, version)][0]
        self.corr += 1
        head = struct.pack(">hhih", key, version, self.corr, 3) + b"raw"
        if req.FLEXIBLE_VERSION:
            head += b"\x00"
        payload = head + req.SCHEMA.encode(_wire.to_values(req.SCHEMA, body))
        return struct.pack(">i", len(payload)) + payload

    async def read(self, key: int, version: int) -> dict[str, Any] | None:
        import struct
        from io import BytesIO

        from eosflow.testing._codec import REGISTRY, _to_object

        req, resp = REGISTRY[(key, version)]
        assert self._r is not None
        try:
            (size,) = struct.unpack(">i", await asyncio.wait_for(self._r.readexactly(4), 10))
            buf = BytesIO(await self._r.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError):
            self.close()
            self._r = self._w = None
            return None
        buf.read(4)  # correlation id
        if req.FLEXIBLE_VERSION and key != 18:
            buf.read(1)  # no tagged fields
        names = set(resp.SCHEMA.names)
        return _to_object(resp.SCHEMA, resp.decode(buf), names)

    async def send(self, key: int, version: int, body: dict[str, Any]) -> dict[str, Any] | None:
        if self._w is None:
            await self._open()
        assert self._w is not None
        self._w.write(self.frame(key, version, body))
        await self._w.drain()
        return await self.read(key, version)


def ladder_config(b: Broker, src: str, group: str, **kw: object) -> eosflow.EosConfig:
    """An app's config on the ladder's broker: timeouts scaled to its minimum session."""
    session = max(b.min_session_timeout_s, 1.0) * 6
    base: dict[str, object] = dict(
        bootstrap_servers=b.bootstrap_servers,
        group_id=group,
        input_topics=(src,),
        transactional_id=b.unique("tx"),
        session_timeout_s=session,
        heartbeat_interval_s=session / 10,
        transaction_timeout_s=session * 0.8,
    )
    base.update(kw)
    return eosflow.EosConfig(**base)  # type: ignore[arg-type]


def key_in(partition: int, partitions: int, name: str) -> bytes:
    """A key Kafka's default partitioner puts in ``partition`` of ``partitions``:
    ``name``, or ``name`` with the first suffix (``~1``, ``~2``, ...) that lands there --
    for tests that place keyed records by hand in co-partitioned topics, which eosflow
    checks (``_state/_placement.py``)."""
    from eosflow._aiokafka import default_partition

    i = 0
    while True:
        key = (name if i == 0 else f"{name}~{i}").encode()
        if partitions == 1 or default_partition(key, partitions) == partition:
            return key
        i += 1


async def demo(*args: str) -> str:
    """``eosflow demo ARGS`` run to its end (exit 0, a SIGKILL on the way): its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOSFLOW_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "eosflow", "demo", *args),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        if proc.returncode is None:  # timed out: ^C stops it and what it started
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0, out.decode() + err.decode()
    assert "SIGKILL instance 0" in out.decode()
    # every variant ends with one line of one form (issue 51.11)
    last = out.decode().rstrip().splitlines()[-1]
    assert last.startswith("EXACTLY ONCE: OK -- the ") and "SIGKILLed" in last, last
    return out.decode()


def get(port: int, path: str) -> tuple[int, str]:
    """GET ``path`` on an app's operations port (blocking: call it in a thread)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def state_value(app: eosflow.EosApp, store: str, key: str) -> Any:
    """The first value ``GET /state/<store>/<key>`` answers on ``app``'s operations port
    (the answer must be 200)."""
    port = app.ops.port
    assert port is not None, "the app serves no operations port"
    status, body = await asyncio.to_thread(get, port, f"/state/{store}/{key}")
    assert status == 200, body
    return json.loads(body)["values"][0]["value"]
