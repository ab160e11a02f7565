"""Credentials that change while eosflow runs, on a secured genuine Kafka.

The broker here ends every SASL session after ``connections.max.reauth.ms`` (KIP-368).
aiokafka cannot re-authenticate a session, so the broker closes its connections every
few seconds and aiokafka logs in again on new ones -- as on a managed Kafka that sets
the limit. Exactly once must hold through that; and once the user's password is rotated,
the next login is refused, which aiokafka only logs and retries for ever. The app must
then stop with an ``AuthenticationError`` naming the user, commit nothing half-done,
and a restart with the new password must finish the work exactly once."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio
from conftest import genuine, version
from test_security import config as config_for
from test_security import topics

import eosflow
from eosflow import AuthenticationError, KafkaSecurity
from eosflow.testing import CheckReport, check_exactly_once
from testbed._genuine_security import (
    SecuredKafka,
    app_acls,
    create_acls,
    set_scram_password,
)

pytestmark = [pytest.mark.genuine, pytest.mark.asyncio(loop_scope="module")]
SESSION_MS = 3000  # the broker's connections.max.reauth.ms
N = 4000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def kafka() -> AsyncIterator[SecuredKafka]:
    config = {"connections.max.reauth.ms": str(SESSION_MS)}
    async with genuine(version(), secured=True, config=config) as k:
        assert isinstance(k, SecuredKafka)
        yield k


class Paced(eosflow.Processor):
    """Copies each value upper-cased, 2 ms a record: a run spans several sessions."""

    def __init__(self, out: str) -> None:
        self.out = out

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        await asyncio.sleep(0.002)
        assert record.value is not None
        return eosflow.Output(self.out, record.value.upper(), key=record.key)


class User:
    """A SCRAM-SHA-512 user of its own (the module's tests rotate its password) with
    the documented ACLs on fresh topics, group and transactional id."""

    def __init__(self, k: SecuredKafka, tag: str) -> None:
        self.k, self.tag, self.name = k, tag, f"{tag}-user"

    async def create(self, password: str) -> None:
        k = self.k
        self.src, self.dst, _dlq, self.group, self.txn = await topics(k, self.tag, n=N)
        await set_scram_password(k.bootstrap_servers, self.name, password)
        principal = f"User:{self.name}"
        acls = app_acls(
            principal,
            transactional_id=self.txn,
            group_id=self.group,
            inputs=(self.src,),
            outputs=(self.dst,),
        )
        await create_acls(k.bootstrap_servers, acls)

    def app(self, password: str) -> eosflow.EosApp:
        assert self.k.pki is not None
        security = KafkaSecurity(
            security_protocol="SASL_SSL",
            ssl_cafile=self.k.pki.ca,
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=self.name,
            sasl_password=password,  # type: ignore[arg-type]
        )
        servers = self.k.secured_servers()
        config = config_for(servers, security, self.src, self.group, self.txn, None)
        # small transactions: several commits between the broker's session ends
        config = config.model_copy(update={"max_records_per_txn": 200})
        return eosflow.EosApp(Paced(self.dst), config)

    async def report(self) -> CheckReport:
        k = self.k  # the super user reads, over PLAINTEXT
        return await check_exactly_once(
            k.bootstrap_servers, self.src, self.dst, group_id=self.group
        )


async def until(
    task: asyncio.Task[None], what: str, ok: Callable[[], Awaitable[bool]], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await ok():
        assert not task.done(), task.exception() if task.done() else None
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s"
        await asyncio.sleep(0.2)


async def test_exactly_once_while_the_broker_ends_each_login_session(kafka: SecuredKafka) -> None:
    """aiokafka's connections are closed every SESSION_MS; the run spans several."""
    user = User(kafka, "sessions")
    await user.create("pw-one")
    app = user.app("pw-one")
    began = time.monotonic()
    task = asyncio.create_task(app.run())

    async def done() -> bool:
        return app.stats.records >= N and (await user.report()).ok

    await until(task, "all copied", done, 120)
    await app.stop()
    await task
    assert time.monotonic() - began > 2 * SESSION_MS / 1000  # sessions did expire meanwhile
    assert (await user.report()).ok


async def _rotated(
    k: SecuredKafka, tag: str, when: str, caplog: pytest.LogCaptureFixture
) -> tuple[User, str, float]:
    """Run an app, rotate its password ``when`` ("busy": mid-copy, "idle": after all was
    copied); return the user, the app's error and the seconds from rotation to error."""
    user = User(k, tag)
    await user.create("old-pw-123")
    app = user.app("old-pw-123")
    task = asyncio.create_task(app.run())

    async def ready() -> bool:
        if when == "busy":
            return app.stats.committed >= 3
        return app.stats.records >= N and (await user.report()).ok

    with caplog.at_level(logging.DEBUG):
        await until(task, f"{when} before the rotation", ready, 120)
        await set_scram_password(k.bootstrap_servers, user.name, "new-pw-456")
        rotated = time.monotonic()
        with pytest.raises(AuthenticationError) as info:
            await asyncio.wait_for(task, 90)
    text = str(info.value)
    assert "\n" not in text and "old-pw-123" not in caplog.text + text, text
    assert f"authentication failed for user {user.name!r} (SCRAM-SHA-512)" in text, text
    return user, text, time.monotonic() - rotated


async def test_a_password_rotated_mid_run_stops_the_app_and_the_new_one_resumes(
    kafka: SecuredKafka, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the bound on the flush the app waits for ever: a transactional aiokafka
    producer resends a batch to a broker that refuses it until the end of time."""
    user, _text, took = await _rotated(kafka, "busy", "busy", caplog)
    # transaction_timeout_s 5: the flush's bound, then the diagnosis, then the close
    assert took < 30, took
    half = await user.report()
    assert not half.duplicated and not half.strays, half.summary()
    assert half.lost and len(half.lost) == sum(half.offsets_behind.values()), half.summary()
    app = user.app("new-pw-456")
    task = asyncio.create_task(app.run())

    async def done() -> bool:
        return (await user.report()).ok

    await until(task, "the rest copied with the new password", done, 120)
    await app.stop()
    await task
    assert (await user.report()).ok


async def test_a_password_rotated_while_idle_stops_the_app(
    kafka: SecuredKafka, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing to produce, so nothing but the consumer's fetches meets the refusal,
    which aiokafka only logs: without the login watch the app idles for ever."""
    user, _text, took = await _rotated(kafka, "idle", "idle", caplog)
    assert took < SESSION_MS / 1000 + 10, took  # the session's end, then a poll
    assert (await user.report()).ok
