"""The caps of a transaction (``_engine._sizing.caps``): an app working ahead gets twice
each default it leaves unset; a cap given, in code or through ``EOSFLOW_*``, is kept. The
producer's batch size limit (``batch_bytes``) alike: ``AHEAD_BATCH_BYTES`` where the app
works ahead and leaves it unset."""

from __future__ import annotations

import pytest

import eosflow
from eosflow._engine._sizing import AHEAD_BATCH_BYTES, AHEAD_CAPS, Sizing, batch_bytes, caps

DEFAULT_RECORDS = eosflow.EosConfig.model_fields["max_records_per_txn"].default
DEFAULT_BYTES = eosflow.EosConfig.model_fields["max_bytes_per_txn"].default
DEFAULT_BATCH = eosflow.EosConfig.model_fields["max_batch_bytes"].default


@pytest.fixture(autouse=True)
def no_caps_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EOSFLOW_MAX_RECORDS_PER_TXN", raising=False)
    monkeypatch.delenv("EOSFLOW_MAX_BYTES_PER_TXN", raising=False)
    monkeypatch.delenv("EOSFLOW_MAX_BATCH_BYTES", raising=False)


def config(**kw: object) -> eosflow.EosConfig:
    return eosflow.EosConfig(
        bootstrap_servers="127.0.0.1:9",
        group_id="g",
        input_topics=("in",),
        transactional_id="t",
        **kw,
    )


def test_an_app_working_ahead_gets_twice_the_defaults() -> None:
    assert AHEAD_CAPS == 2
    assert caps(config(), ahead=True) == (2 * DEFAULT_RECORDS, 2 * DEFAULT_BYTES)
    sizing = Sizing(config(), ahead=True)
    assert sizing.limit == 2 * DEFAULT_RECORDS
    assert not sizing.full(2 * DEFAULT_BYTES - 1) and sizing.full(2 * DEFAULT_BYTES)


def test_the_doubled_caps_are_logged_once_and_only_when_doubled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="eosflow.app")
    Sizing(config(), ahead=True)
    Sizing(config(), ahead=False)
    Sizing(config(max_records_per_txn=7, max_bytes_per_txn=None), ahead=True)
    said = [r.getMessage() for r in caplog.records if "works ahead" in r.getMessage()]
    assert said == [
        "the app works ahead: transactions hold up to 40,000 records and 4,194,304 key+value "
        "bytes (twice the default of each cap the config leaves unset)"
    ]


def test_the_limit_grows_back_to_the_doubled_cap_after_a_failure() -> None:
    sizing = Sizing(config(), ahead=True)
    assert sizing.failed(100) == 50
    for _ in range(100):
        sizing.committed()
    assert sizing.limit == 2 * DEFAULT_RECORDS


def test_an_app_not_working_ahead_keeps_the_defaults() -> None:
    assert caps(config(), ahead=False) == (DEFAULT_RECORDS, DEFAULT_BYTES)
    sizing = Sizing(config())
    assert sizing.limit == DEFAULT_RECORDS
    assert not sizing.full(DEFAULT_BYTES - 1) and sizing.full(DEFAULT_BYTES)


@pytest.mark.parametrize("ahead", [True, False])
def test_caps_given_are_kept_even_at_the_default_value(ahead: bool) -> None:
    given = config(max_records_per_txn=DEFAULT_RECORDS, max_bytes_per_txn=DEFAULT_BYTES)
    assert caps(given, ahead) == (DEFAULT_RECORDS, DEFAULT_BYTES)
    assert caps(config(max_bytes_per_txn=None), ahead) == (
        (2 if ahead else 1) * DEFAULT_RECORDS,
        None,
    )


def test_a_cap_from_the_environment_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOSFLOW_MAX_RECORDS_PER_TXN", "1000")
    assert caps(config(), ahead=True) == (1000, 2 * DEFAULT_BYTES)


def test_the_batch_size_is_raised_only_where_the_app_works_ahead_and_leaves_it_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert AHEAD_BATCH_BYTES > DEFAULT_BATCH
    assert batch_bytes(config(), ahead=True) == AHEAD_BATCH_BYTES
    assert batch_bytes(config(), ahead=False) == DEFAULT_BATCH
    assert batch_bytes(config(max_batch_bytes=DEFAULT_BATCH), ahead=True) == DEFAULT_BATCH
    monkeypatch.setenv("EOSFLOW_MAX_BATCH_BYTES", "1000")
    assert batch_bytes(config(), ahead=True) == 1000
