"""eosflow on a secured genuine Kafka (``SecuredKafka``): SASL_SSL with
SCRAM-SHA-512 and mutual TLS, each with exactly the ACLs docs/howto/security.md lists;
each missing ACL a fatal one-line ``AuthorizationError`` with nothing committed; a wrong
password, an untrusted CA and an expired broker certificate each an
``AuthenticationError`` within the connect timeout. No secret appears in any error or log line."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from conftest import genuine, version
from fleet import Fleet, chaos_env, run_chaos, seed
from kit import Upper, create_topic, read_all

import eosflow
from eosflow import AuthenticationError, AuthorizationError, KafkaSecurity
from eosflow.testing import check_counts, check_exactly_once
from examples.counting import Count
from testbed._genuine_security import (
    MTLS_PRINCIPAL,
    READ,
    SCRAM_PRINCIPAL,
    SCRAM_USER,
    TOPIC,
    WRITE,
    Acl,
    SecuredKafka,
    app_acls,
    create_acls,
    state_acls,
)

pytestmark = [pytest.mark.genuine, pytest.mark.asyncio(loop_scope="module")]
N = 2000
CONNECT_BUDGET_S = 15.0  # a refused login or handshake must end the app within this


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def kafka() -> AsyncIterator[SecuredKafka]:
    async with genuine(version(), secured=True) as k:
        assert isinstance(k, SecuredKafka)
        yield k


def scram(k: SecuredKafka, password: str | None = None) -> KafkaSecurity:
    assert k.pki is not None
    return KafkaSecurity(
        security_protocol="SASL_SSL",
        ssl_cafile=k.pki.ca,
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username=SCRAM_USER,
        sasl_password=password or k.scram_password,  # type: ignore[arg-type]
    )


def oauth(k: SecuredKafka, token: Callable[[], str] | None = None) -> KafkaSecurity:
    """OAUTHBEARER as the SCRAM user's principal, with tokens the test identity provider
    signs (``token`` overrides them)."""
    pki = k.pki
    assert pki is not None
    return KafkaSecurity(
        security_protocol="SASL_SSL",
        ssl_cafile=pki.ca,
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=token or (lambda: pki.tokens.token(SCRAM_USER)),  # type: ignore[arg-type]
    )


def mtls(k: SecuredKafka) -> KafkaSecurity:
    assert k.pki is not None
    return KafkaSecurity(
        security_protocol="SSL",
        ssl_cafile=k.pki.ca,
        ssl_certfile=k.pki.client_cert,
        ssl_keyfile=k.pki.client_key,
    )


async def topics(k: SecuredKafka, tag: str, n: int = N) -> tuple[str, str, str, str, str]:
    """Fresh input (seeded with ``n`` records), output and dead-letter topics, group and
    transactional id, created by the super user over PLAINTEXT."""
    src, dst, dlq = (f"{tag}-{x}-{time.monotonic_ns()}" for x in ("in", "out", "dlq"))
    for t in (src, dst, dlq):
        await create_topic(k.bootstrap_servers, t, 2)
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=k.bootstrap_servers)
    await p.start()
    try:
        futs = [await p.send(src, f"v{i}".encode(), key=str(i).encode()) for i in range(n)]
        await asyncio.gather(*futs)
    finally:
        await p.stop()
    return src, dst, dlq, f"{tag}-g-{time.monotonic_ns()}", f"{tag}-tx-{time.monotonic_ns()}"


def config(
    servers: str, security: KafkaSecurity, src: str, group: str, txn: str, dlq: str | None
) -> eosflow.EosConfig:
    return eosflow.EosConfig(
        bootstrap_servers=servers,
        group_id=group,
        input_topics=(src,),
        transactional_id=txn,
        session_timeout_s=6,
        heartbeat_interval_s=0.6,
        transaction_timeout_s=5,
        dead_letter_topic=dlq,
        retry_timeout_s=20,
        security=security,
    )


async def _exactly_once_over(
    k: SecuredKafka, listener: str, principal: str, security: KafkaSecurity
) -> None:
    src, dst, dlq, group, txn = await topics(k, listener.lower())
    await create_acls(
        k.bootstrap_servers,
        app_acls(
            principal, transactional_id=txn, group_id=group, inputs=(src,), outputs=(dst, dlq)
        ),
    )
    servers = k.secured_servers(listener)
    app = eosflow.EosApp(Upper(dst, dlq_every=50), config(servers, security, src, group, txn, dlq))
    task = asyncio.create_task(app.run())
    deadline = time.monotonic() + 90
    while app.stats.records < N or app.last_outcome is not eosflow.Outcome.COMMITTED:
        assert not task.done(), task.exception() if task.done() else None
        assert time.monotonic() < deadline, f"{app.stats.records} of {N} within 90 s"
        await asyncio.sleep(0.1)
    await app.stop()
    await task
    # the check reads the outputs as the same user, over the same listener: READ on them
    # is granted only now (the app itself never reads its outputs)
    await create_acls(k.bootstrap_servers, [Acl(principal, TOPIC, t, READ) for t in (dst, dlq)])
    report = await check_exactly_once(
        servers, src, dst, group_id=group, dead_letter_topic=dlq, security=security
    )
    assert report.ok, report.summary()
    assert report.dead_lettered == N // 50


async def test_exactly_once_over_sasl_ssl_scram_with_the_documented_acls(
    kafka: SecuredKafka,
) -> None:
    await _exactly_once_over(kafka, "SASL_SSL", SCRAM_PRINCIPAL, scram(kafka))


async def test_exactly_once_over_sasl_ssl_oauthbearer(kafka: SecuredKafka) -> None:
    """The token hook's tokens (unsigned, for Kafka's unsecured validator) log in as the
    same principal as the SCRAM user."""
    await _exactly_once_over(kafka, "SASL_SSL", SCRAM_PRINCIPAL, oauth(kafka))


async def test_exactly_once_over_mutual_tls_with_the_documented_acls(kafka: SecuredKafka) -> None:
    await _exactly_once_over(kafka, "MTLS", MTLS_PRINCIPAL, mtls(kafka))


async def test_exactly_once_state_over_sasl_ssl_with_the_documented_acls(
    kafka: SecuredKafka, tmp_path: Path
) -> None:
    """The running count over SASL_SSL with the documented ACLs, its changelog grant included;
    without that grant, the start stops with one line naming CREATE on the changelog."""
    k = kafka
    src, dst, _dlq, group, txn = await topics(k, "state")
    await create_acls(
        k.bootstrap_servers,
        app_acls(
            SCRAM_PRINCIPAL, transactional_id=txn, group_id=group, inputs=(src,), outputs=(dst,)
        ),
    )
    cfg = config(k.secured_servers(), scram(k), src, group, txn, None).model_copy(
        update={"state_dir": str(tmp_path)}
    )
    os.environ["EOSFLOW_APP_OUTPUT"] = dst
    try:
        counting = Count()
    finally:
        del os.environ["EOSFLOW_APP_OUTPUT"]
    with pytest.raises(AuthorizationError) as info:
        await asyncio.wait_for(eosflow.EosApp(counting, cfg).run(), 60)
    changelog = f"{group}--{src}--counts--changelog"
    assert f"refused CREATE on topic {changelog}" in str(info.value), info.value
    await create_acls(k.bootstrap_servers, state_acls(SCRAM_PRINCIPAL, group))
    app = eosflow.EosApp(counting, cfg)
    async with app:
        deadline = time.monotonic() + 90
        while app.stats.records < N or app.last_outcome is not eosflow.Outcome.COMMITTED:
            assert app.failure is None, app.failure
            assert time.monotonic() < deadline, f"{app.stats.records} of {N} within 90 s"
            await asyncio.sleep(0.1)
    await create_acls(k.bootstrap_servers, [Acl(SCRAM_PRINCIPAL, TOPIC, dst, READ)])
    report = await check_counts(
        k.secured_servers(), src, dst, changelog, group_id=group, security=scram(k)
    )
    assert report.ok, report.summary()
    # a restart finds the changelog there: it checks it (DESCRIBE_CONFIGS) and restores
    async with eosflow.EosApp(counting, cfg) as again:
        deadline = time.monotonic() + 60
        while not again.assigned:
            assert again.failure is None, again.failure
            assert time.monotonic() < deadline, "the restarted app took no partition"
            await asyncio.sleep(0.1)


@pytest.mark.parametrize(
    ("missing", "says"),
    [
        ("transactional id", "WRITE and DESCRIBE on the transactional id"),
        ("group", "refused READ on the group"),
        ("input topic", "refused READ on topic {name}"),
        ("output topic", "refused WRITE on topic {name}"),
        ("dead-letter topic", "refused WRITE on topic {name}"),
    ],
)
async def test_a_missing_acl_stops_the_app_with_one_line_and_commits_nothing(
    kafka: SecuredKafka, missing: str, says: str, caplog: pytest.LogCaptureFixture
) -> None:
    k = kafka
    src, dst, dlq, group, txn = await topics(k, "acl", n=200)
    acls = app_acls(
        SCRAM_PRINCIPAL, transactional_id=txn, group_id=group, inputs=(src,), outputs=(dst, dlq)
    )
    name = {"transactional id": txn, "group": group, "input topic": src}.get(missing)
    name = name or {"output topic": dst, "dead-letter topic": dlq}[missing]
    await create_acls(k.bootstrap_servers, [a for a in acls if a.resource_name != name])
    cfg = config(k.secured_servers(), scram(k), src, group, txn, dlq)
    app = eosflow.EosApp(Upper(dst, dlq_every=1 if missing == "dead-letter topic" else 0), cfg)
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(AuthorizationError) as info:
            await asyncio.wait_for(app.run(), 60)
    text = str(info.value)
    assert says.format(name=name) in text and "not authorized" in text, text
    assert "\n" not in text
    assert k.scram_password not in text and k.scram_password not in caplog.text
    # nothing committed: no output or dead letter visible, no offset committed
    assert await read_all(k.bootstrap_servers, dst) == []
    assert await read_all(k.bootstrap_servers, dlq) == []
    report = await check_exactly_once(k.bootstrap_servers, src, dst, group_id=group)
    assert report.offsets_behind and sum(report.offsets_behind.values()) == 200


async def _refused(k: SecuredKafka, servers: str, security: KafkaSecurity) -> str:
    src, dst, _dlq, group, txn = await topics(k, "auth", n=1)
    app = eosflow.EosApp(Upper(dst), config(servers, security, src, group, txn, None))
    began = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        await asyncio.wait_for(app.run(), CONNECT_BUDGET_S * 2)
    assert time.monotonic() - began < CONNECT_BUDGET_S
    text = str(info.value)
    assert "\n" not in text and k.scram_password not in text
    return text


async def test_a_wrong_password_is_an_authentication_error_naming_the_user(
    kafka: SecuredKafka, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        text = await _refused(kafka, kafka.secured_servers(), scram(kafka, "wrong-pw-123"))
    assert f"authentication failed for user {SCRAM_USER!r} (SCRAM-SHA-512)" in text, text
    assert "wrong-pw-123" not in text and "wrong-pw-123" not in caplog.text


@pytest.mark.parametrize("token", ["signed by a key the broker never saw", "expired"])
async def test_an_oauthbearer_token_the_broker_refuses_is_an_authentication_error(
    kafka: SecuredKafka, token: str
) -> None:
    """The broker's OIDC validator checks the signature against the identity provider's
    key set, and the expiry; either refusal ends the app at once, not in a retry loop."""
    pki = kafka.pki
    assert pki is not None
    if token == "expired":
        security = oauth(kafka, lambda: pki.tokens.token(SCRAM_USER, lifetime_s=-120))
    else:
        security = oauth(kafka, lambda: pki.rogue_tokens.token(SCRAM_USER))
    text = await _refused(kafka, kafka.secured_servers(), security)
    assert "authentication failed for an OAUTHBEARER token" in text, text


async def test_an_untrusted_ca_is_an_authentication_error(kafka: SecuredKafka) -> None:
    assert kafka.pki is not None
    security = scram(kafka).model_copy(update={"ssl_cafile": kafka.pki.other_ca})
    text = await _refused(kafka, kafka.secured_servers(), security)
    assert "the broker's certificate was refused" in text, text
    # OpenSSL's words: the broker sends its CA in the chain, which nothing here trusts
    assert "self-signed certificate in certificate chain" in text, text


async def test_an_expired_broker_certificate_is_an_authentication_error(
    kafka: SecuredKafka,
) -> None:
    assert kafka.pki is not None
    security = KafkaSecurity(security_protocol="SSL", ssl_cafile=kafka.pki.ca)
    text = await _refused(kafka, kafka.secured_servers("EXPIRED"), security)
    assert "certificate has expired" in text, text


async def test_mutual_tls_without_a_client_certificate_is_refused(kafka: SecuredKafka) -> None:
    assert kafka.pki is not None
    security = KafkaSecurity(security_protocol="SSL", ssl_cafile=kafka.pki.ca)
    text = await _refused(kafka, kafka.secured_servers("MTLS"), security)
    assert text.startswith("TLS to 127.0.0.1:"), text
    assert "the broker refused the connection" in text and "ssl_certfile" in text, text


async def test_eosflow_run_exits_1_with_one_line_on_a_wrong_password(kafka: SecuredKafka) -> None:
    assert kafka.pki is not None
    src, _dst, _dlq, group, txn = await topics(kafka, "cli", n=1)
    env = {
        **os.environ,
        "EOSFLOW_SECURITY_PROTOCOL": "SASL_SSL",
        "EOSFLOW_SASL_MECHANISM": "SCRAM-SHA-512",
        "EOSFLOW_SASL_USERNAME": SCRAM_USER,
        "EOSFLOW_SASL_PASSWORD": "wrong-pw-456",
        "EOSFLOW_SSL_CAFILE": str(kafka.pki.ca),
    }
    args = ["--bootstrap-servers", kafka.secured_servers(), "--group-id", group]
    args += ["--input-topic", src, "--transactional-id", txn]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "eosflow", "run", "eosflow._demo:Enrich", *args,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), CONNECT_BUDGET_S * 2)
    lines = [ln for ln in err.decode().splitlines() if ln.startswith("eosflow:")]
    assert proc.returncode == 1, err.decode()[-2000:]
    assert len(lines) == 1 and "authentication failed for user 'app'" in lines[0], lines
    assert b"wrong-pw-456" not in out + err


async def test_chaos_over_sasl_ssl_is_exactly_once(kafka: SecuredKafka) -> None:
    """The instance chaos of ``tests/runtime/test_chaos.py`` (three ``eosflow run``
    instances, SIGKILLs and restarts, a zombie) over SASL_SSL with the documented ACLs."""
    k, rng = kafka, random.Random(20261123)
    assert k.pki is not None
    records, in_parts, instances, session_s = 20_000, 6, 3, 2.0
    tag = f"chaos-{time.monotonic_ns()}"
    src, dst, group = f"{tag}-in", f"{tag}-out", f"{tag}-g"
    await create_topic(k.bootstrap_servers, src, in_parts)
    await create_topic(k.bootstrap_servers, dst, 3)
    await seed(k.bootstrap_servers, src, records)
    env = chaos_env(session_s) | scram_env(k)
    fleet = Fleet(k.secured_servers(), src, dst, group, tag, env, k.bootstrap_servers)
    await grant_fleet(k, fleet, instances)
    await run_chaos(fleet, rng, instances, session_s, in_parts, records)


def scram_env(k: SecuredKafka) -> dict[str, str]:
    """`eosflow run`'s settings for the SASL_SSL listener as the SCRAM user."""
    assert k.pki is not None
    return {
        "EOSFLOW_SECURITY_PROTOCOL": "SASL_SSL",
        "EOSFLOW_SASL_MECHANISM": "SCRAM-SHA-512",
        "EOSFLOW_SASL_USERNAME": SCRAM_USER,
        "EOSFLOW_SASL_PASSWORD": k.scram_password,
        "EOSFLOW_SSL_CAFILE": str(k.pki.ca),
    }


async def grant_fleet(k: SecuredKafka, fleet: Fleet, instances: int) -> None:
    """The documented ACLs for each of the fleet's instances, as the SCRAM user."""
    for i in range(instances):
        acls = app_acls(
            SCRAM_PRINCIPAL,
            transactional_id=fleet.transactional_id(i),
            group_id=fleet.group,
            inputs=(fleet.src,),
            outputs=(fleet.dst,),
        )
        await create_acls(k.bootstrap_servers, acls)


async def test_a_producer_closed_by_force_over_tls_does_not_cancel_its_closer(
    kafka: SecuredKafka,
) -> None:
    """A producer whose broker stopped answering is closed by force once ``stop()`` runs
    out of time. Over TLS, closing a connection waits for the broker's close_notify, so
    the timed-out ``stop()`` leaves aiokafka's connection-closed futures cancelled, and
    the forced close gathers them again: that CancelledError is not the caller's. It
    escaped once and ended an instance in the broker chaos over SASL_SSL."""
    from aiokafka import AIOKafkaProducer

    from eosflow import _aiokafka as ak
    from eosflow._aiokafka._security import connection_settings

    k = kafka
    src, *_ = await topics(k, "close", n=1)
    await create_acls(k.bootstrap_servers, [Acl(SCRAM_PRINCIPAL, TOPIC, src, WRITE)])
    p = AIOKafkaProducer(bootstrap_servers=k.secured_servers(), **connection_settings(scram(k)))
    await p.start()
    await p.send_and_wait(src, b"before")
    node = k.node_ids[0]
    k.stop_node(node)
    try:
        # nothing in flight: stop() reaches the connections' close and waits there for
        # the stopped broker's close_notify until the timeout cuts it
        await asyncio.wait_for(ak.close_producer(p, timeout_s=1.0), 60)
    finally:
        k.cont(node)
