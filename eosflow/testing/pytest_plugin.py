"""pytest fixtures shipped with eosflow (registered through the ``pytest11`` entry point).

- ``eosflow_broker``: a ``Broker`` from the ladder (genuine cluster, container, or the
  test cluster), fresh per test.
- ``eosflow_cluster``: always the in-process ``FakeCluster`` (for fault injection).

A test that calls ``broker.require_fake(...)`` on a genuine broker is skipped with the
reason, never silently passed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from ._cluster import FakeCluster
from ._ladder import Broker, NotOnThisBroker, fake_settings, open_broker


@pytest_asyncio.fixture
async def eosflow_broker() -> AsyncIterator[Broker]:
    async with open_broker() as broker:
        yield broker


@pytest_asyncio.fixture
async def eosflow_cluster() -> AsyncIterator[FakeCluster]:
    async with FakeCluster(fake_settings()) as cluster:
        yield cluster


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    outcome = yield
    excinfo = outcome.excinfo
    if excinfo is not None and isinstance(excinfo[1], NotOnThisBroker):
        outcome.force_exception(pytest.skip.Exception(str(excinfo[1]), _use_item_location=True))
