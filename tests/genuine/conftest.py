"""Genuine Kafka tests run only when asked: ``-m genuine`` or
``EOSFLOW_TEST_BROKER=genuine[:version]``. A broker that cannot run here (no Java or
Maven, jars not resolvable) skips them with the reason, except in CI (``CI=true``), where
it fails them; a broker that does not start always fails them, with its log's tail."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import pytest

from eosflow.testing._genuine import GenuineKafka, GenuineUnavailable
from eosflow.testing._ladder import genuine_version
from testbed._genuine_security import SecuredKafka

ASK = "genuine Kafka tests run only with -m genuine or EOSFLOW_TEST_BROKER=genuine[:version]"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    asked = "genuine" in (config.option.markexpr or "") or bool(
        os.environ.get("EOSFLOW_TEST_BROKER", "").startswith("genuine")
    )
    if not asked:
        for item in items:
            if item.get_closest_marker("genuine") is not None:
                item.add_marker(pytest.mark.skip(reason=ASK))


def version() -> str:
    """The version the ladder was asked for, else GenuineKafka's default."""
    return genuine_version() or GenuineKafka().version


@contextlib.asynccontextmanager
async def genuine(
    version: str,
    brokers: int = 1,
    *,
    secured: bool = False,
    config: dict[str, str] | None = None,
    features: dict[str, int] | None = None,
) -> AsyncIterator[GenuineKafka]:
    """Genuine brokers for one test; ``secured``: a ``SecuredKafka`` (its listeners, SCRAM
    user, PKI and ACLs)."""
    kind = SecuredKafka if secured else GenuineKafka
    kafka = kind(version, brokers, config=config, features=features)
    try:
        await kafka.start()
    except GenuineUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"genuine Kafka {version} cannot run here (CI: no skipping): {exc}")
        pytest.skip(f"genuine Kafka {version} cannot run here: {exc}")
    try:
        yield kafka
    finally:
        await kafka.stop()
