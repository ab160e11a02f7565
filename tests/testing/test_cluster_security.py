"""The test cluster's TLS and SASL (``ClusterSecurity``): eosflow runs exactly once over
SASL_SSL with each mechanism; a wrong password is refused as genuine Kafka refuses it
(SASL_AUTHENTICATION_FAILED, its message, the connection closed) and eosflow reports the
same one line as on genuine Kafka (``tests/genuine/test_security.py``)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiokafka.protocol.admin import SaslAuthenticateRequest_v1, SaslHandShakeRequest_v1
from kit import Upper

import eosflow
from eosflow import AuthenticationError, KafkaSecurity
from eosflow._aiokafka import plain_producer
from eosflow._protocol import _codes as codes
from eosflow.testing import ClusterSecurity, ClusterSettings, FakeCluster, check_exactly_once
from testbed._pki import Pki, make_pki

USERS = {"app": "app-secret", "other": "x"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest_asyncio.fixture
async def cluster(pki: Pki) -> AsyncIterator[FakeCluster]:
    security = ClusterSecurity(users=USERS, certfile=pki.broker)
    async with FakeCluster(ClusterSettings(security=security)) as c:
        yield c


def sasl(pki: Pki, mechanism: str, password: str = "app-secret") -> KafkaSecurity:
    return KafkaSecurity(
        security_protocol="SASL_SSL",
        ssl_cafile=pki.ca,
        sasl_mechanism=mechanism,  # type: ignore[arg-type]
        sasl_username="app",
        sasl_password=password,  # type: ignore[arg-type]
    )


def config(c: FakeCluster, security: KafkaSecurity, tag: str) -> eosflow.EosConfig:
    return eosflow.EosConfig(
        bootstrap_servers=c.bootstrap_servers,
        group_id=f"g-{tag}",
        input_topics=(f"in-{tag}",),
        transactional_id=f"tx-{tag}",
        session_timeout_s=6,
        heartbeat_interval_s=0.5,
        transaction_timeout_s=5,
        security=security,
    )


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_exactly_once_over_sasl_ssl(cluster: FakeCluster, pki: Pki, mechanism: str) -> None:
    tag = mechanism.lower()
    cluster.create_topic(f"in-{tag}", 2)
    cluster.create_topic(f"out-{tag}", 2)
    security = sasl(pki, mechanism)
    producer = plain_producer(cluster.bootstrap_servers, security)  # seeds over SASL_SSL too
    await producer.start()
    try:
        for i in range(300):
            await producer.send(f"in-{tag}", f"v{i}".encode(), key=str(i).encode())
        await producer.flush()
    finally:
        await producer.stop()
    app = eosflow.EosApp(Upper(f"out-{tag}"), config(cluster, security, tag))
    async with app:
        while app.stats.records < 300 or app.last_outcome is not eosflow.Outcome.COMMITTED:
            assert app.failure is None, app.failure
            await asyncio.sleep(0.05)
    report = await check_exactly_once(
        cluster.bootstrap_servers, f"in-{tag}", f"out-{tag}", group_id=f"g-{tag}", security=security
    )
    assert report.ok, report.summary()


async def test_a_wrong_password_is_refused_as_genuine_kafka_refuses_it(
    cluster: FakeCluster, pki: Pki
) -> None:
    cluster.create_topic("in-wrong", 1)
    app = eosflow.EosApp(Upper("out"), config(cluster, sasl(pki, "SCRAM-SHA-512", "nope"), "wrong"))
    with pytest.raises(AuthenticationError) as info:
        await asyncio.wait_for(app.run(), 30)
    text = str(info.value)
    assert "authentication failed for user 'app' (SCRAM-SHA-512)" in text, text
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in text, text
    assert "nope" not in text


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api: int, version: int, body: bytes
) -> bytes | None:
    client = b"raw"
    head = struct.pack(">hhih", api, version, 7, len(client)) + client
    try:
        writer.write(struct.pack(">i", len(head) + len(body)) + head + body)
        await writer.drain()
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
        return (await reader.readexactly(size))[4:]  # without the correlation id
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


async def test_a_refused_login_closes_the_connection_and_nothing_goes_before_login(
    cluster: FakeCluster, pki: Pki
) -> None:
    import ssl

    ctx = ssl.create_default_context(cafile=str(pki.ca))
    host, port = cluster.bootstrap_servers.rsplit(":", 1)
    r, w = await asyncio.open_connection(host, int(port), ssl=ctx)
    shake = SaslHandShakeRequest_v1("PLAIN").encode()
    answer = await _exchange(r, w, 17, 1, shake)
    assert answer is not None and struct.unpack_from(">h", answer)[0] == 0
    login = SaslAuthenticateRequest_v1(b"\0app\0wrong").encode()
    answer = await _exchange(r, w, 36, 1, login)
    assert answer is not None
    (code,) = struct.unpack_from(">h", answer)
    assert code == codes.SASL_AUTHENTICATION_FAILED
    assert await _exchange(r, w, 18, 0, b"") is None, "the connection is closed after it"
    w.close()
    r, w = await asyncio.open_connection(host, int(port), ssl=ctx)
    metadata = struct.pack(">i", 0)  # Metadata v0, no topics
    assert await _exchange(r, w, 3, 0, metadata) is None, "a request before login closes"
    w.close()


async def test_an_unsupported_mechanism_names_the_enabled_ones(pki: Pki) -> None:
    security = ClusterSecurity(users=USERS, certfile=pki.broker, mechanisms=("PLAIN",))
    async with FakeCluster(ClusterSettings(security=security)) as c:
        c.create_topic("in-m", 1)
        app = eosflow.EosApp(Upper("out"), config(c, sasl(pki, "SCRAM-SHA-512"), "m"))
        with pytest.raises(AuthenticationError, match="the broker does not enable SCRAM-SHA-512"):
            await asyncio.wait_for(app.run(), 30)
