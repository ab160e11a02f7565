"""The collector's threshold while apps run (``eosflow._collector``): raised while any
app runs, the interpreter's own back once the last one stops, in any order."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from kit import eventually

import eosflow
import eosflow.testing
from eosflow._engine._collector import collecting


@pytest.fixture(autouse=True)
def interpreters_own() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield gc.get_threshold()
    gc.set_threshold(*before)


def test_raised_while_an_app_runs_then_restored() -> None:
    with collecting(20_000):
        assert gc.get_threshold() == (20_000, 10, 10)  # the older generations untouched
    assert gc.get_threshold() == (700, 10, 10)


def test_none_leaves_the_collector_alone() -> None:
    with collecting(None):
        assert gc.get_threshold() == (700, 10, 10)


def test_two_apps_stopping_out_of_order_restore_the_interpreters_own() -> None:
    first, second = collecting(20_000), collecting(5_000)
    first.__enter__()
    second.__enter__()
    assert gc.get_threshold()[0] == 20_000  # the highest asked
    first.__exit__(None, None, None)  # the first leaves first
    assert gc.get_threshold()[0] == 20_000  # the second still runs
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_the_setting_reads_none_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOSFLOW_GC_THRESHOLD", "none")
    monkeypatch.setenv("EOSFLOW_MAX_BYTES_PER_TXN", "None")
    config = eosflow.load_config(
        bootstrap_servers="b:9092", group_id="g", input_topics=("t",), transactional_id="x"
    )
    assert config.gc_threshold is None and config.max_bytes_per_txn is None
    assert eosflow.EosConfig.model_fields["gc_threshold"].default == 20_000


async def test_an_app_runs_under_its_threshold(
    eosflow_cluster: eosflow.testing.FakeCluster,
) -> None:
    eosflow_cluster.create_topic("in", 1)
    config = eosflow.EosConfig(
        bootstrap_servers=eosflow_cluster.bootstrap_servers,
        group_id="g",
        input_topics=("in",),
        transactional_id="gc-1",
        gc_threshold=12_345,
    )

    class Nothing(eosflow.Processor):
        async def process(self, record: eosflow.Record) -> None:
            return None

    async with eosflow.EosApp(Nothing(), config):

        async def raised() -> bool:  # once the app's task has begun to run
            return gc.get_threshold()[0] == 12_345

        await eventually(raised, timeout_s=5, what="the app's threshold")
    assert gc.get_threshold() == (700, 10, 10)
