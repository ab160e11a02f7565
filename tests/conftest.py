import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eosflow.testing import FakeCluster
from eosflow.testing._ladder import fake_settings

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "procs"))
sys.path.append(str(Path(__file__).parents[1]))  # examples/, for the tests that run them

BROKER_FIXTURES = {"eosflow_broker", "aged", "broker"}  # fixtures taking the ladder's broker


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    """A test cluster of its own (the ladder's test-cluster settings), for the tests that
    need its fault injection; a module that wants topics in it overrides this fixture
    with one that takes it and creates them."""
    async with FakeCluster(fake_settings()) as c:
        yield c


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that runs against the broker ladder ``ladder``: the CI stages on
    genuine Kafka select them with ``-m ladder`` (the others use the test cluster
    directly and already ran in the first stage)."""
    for item in items:
        if BROKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.ladder)
