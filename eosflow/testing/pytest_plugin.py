"""pytest fixtures shipped with eosflow (registered through the ``pytest11`` entry point).

- ``eosflow_broker``: a ``Broker`` from the ladder (genuine cluster, container, genuine
  Kafka from the jars, or the test cluster), fresh per test (the jars' broker is shared
  by the whole run and stopped when it ends).
- ``eosflow_cluster``: always the in-process ``FakeCluster`` (for fault injection).

The report header says which rung is in use and why the ones above it were not.
A test that calls ``broker.require_fake(...)`` on a genuine broker is skipped with the
reason, never silently passed.

- ``eosflow_schema_registry``: a genuine schema registry (``SchemaRegistry``: Apicurio
  Registry, its Confluent-compatible API at ``.url``, global compatibility BACKWARD),
  one for the whole run, started when a test first asks for it and stopped when the
  run ends; subjects outlive a test, so each test names its own. It needs Java 17 and
  Maven (built once, see ``SchemaRegistry``): where it cannot run, the test is skipped
  with the reason, and fails in CI (``CI=true``). A plain fixture: async tests of any
  loop scope take it, with or without pytest-asyncio.

``eosflow_broker`` and ``eosflow_cluster`` are async and need pytest-asyncio. Installing
eosflow registers this plugin for every pytest run in that environment, so it must load
without pytest-asyncio: then those two stand in as plain fixtures that fail the test
with one line naming what to install, and nothing else changes for projects that never
ask for them.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from ._cluster import FakeCluster
from ._genuine_jars import GenuineUnavailable
from ._ladder import Broker, NotOnThisBroker, describe, fake_settings, open_broker, stop_shared
from ._registry import SchemaRegistry

try:
    import pytest_asyncio
except ImportError:  # eosflow installed without its test extra
    HAVE_ASYNCIO = False
else:
    HAVE_ASYNCIO = True

NEEDS_ASYNCIO = "the {} fixture needs pytest-asyncio: pip install pytest-asyncio"

if HAVE_ASYNCIO:

    @pytest_asyncio.fixture
    async def eosflow_broker() -> AsyncIterator[Broker]:
        async with open_broker() as broker:
            yield broker

    @pytest_asyncio.fixture
    async def eosflow_cluster() -> AsyncIterator[FakeCluster]:
        async with FakeCluster(fake_settings()) as cluster:
            yield cluster

else:

    @pytest.fixture(name="eosflow_broker")
    def _broker_without_asyncio() -> None:
        pytest.fail(NEEDS_ASYNCIO.format("eosflow_broker"), pytrace=False)

    @pytest.fixture(name="eosflow_cluster")
    def _cluster_without_asyncio() -> None:
        pytest.fail(NEEDS_ASYNCIO.format("eosflow_cluster"), pytrace=False)


@pytest.fixture(scope="session")
def eosflow_schema_registry() -> Iterator[SchemaRegistry]:
    registry = SchemaRegistry()
    try:
        registry.start_sync()  # in pytest's own thread, which outlives the run's tests
    except GenuineUnavailable as exc:
        why = f"a genuine schema registry cannot run here: {exc}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why} (CI: no skipping)", pytrace=False)
        pytest.skip(why)
    try:
        yield registry
    finally:
        registry.stop_sync()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    outcome = yield
    excinfo = outcome.excinfo
    if excinfo is not None and isinstance(excinfo[1], NotOnThisBroker):
        outcome.force_exception(pytest.skip.Exception(str(excinfo[1]), _use_item_location=True))


def pytest_report_header(config: pytest.Config) -> list[str]:
    return describe()


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_shared()
