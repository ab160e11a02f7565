import pytest

import eosflow
from eosflow import load_config

BASE = dict(bootstrap_servers="h:1", group_id="g", input_topics=("a",), transactional_id="t")


def test_defaults_follow_the_documented_design() -> None:
    c = eosflow.EosConfig(**BASE)  # type: ignore[arg-type]
    assert c.commit_interval_s == 0.1 and c.post_commit_delay_s == 0.2
    assert c.require_stable_fetch_offsets is True
    assert c.transaction_timeout_s < c.session_timeout_s


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOSFLOW_BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    monkeypatch.setenv("EOSFLOW_GROUP_ID", "grp")
    monkeypatch.setenv("EOSFLOW_INPUT_TOPICS", "orders, payments")
    monkeypatch.setenv("EOSFLOW_TRANSACTIONAL_ID", "grp-1")
    monkeypatch.setenv("EOSFLOW_COMMIT_INTERVAL_S", "0.5")
    c = load_config()
    assert c.input_topics == ("orders", "payments")
    assert c.bootstrap_servers == "k1:9092,k2:9092" and c.commit_interval_s == 0.5


def test_transaction_timeout_must_be_below_session_timeout() -> None:
    with pytest.raises(eosflow.ConfigError, match="transaction_timeout_s"):
        load_config(**BASE, session_timeout_s=10, transaction_timeout_s=10)
    c = load_config(
        **BASE,
        session_timeout_s=10,
        transaction_timeout_s=20,
        allow_transaction_timeout_over_session=True,
    )
    assert c.transaction_timeout_s == 20


def test_bad_values_name_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EOSFLOW_TRANSACTIONAL_ID", raising=False)
    with pytest.raises(eosflow.ConfigError, match="commit_interval_s"):
        load_config(**BASE, commit_interval_s=-1)
    with pytest.raises(eosflow.ConfigError, match="transactional_id"):
        load_config(bootstrap_servers="h:1", group_id="g", input_topics=("a",))
    with pytest.raises(eosflow.ConfigError, match="input_topics"):
        load_config(**{**BASE, "input_topics": ""})


def test_config_is_frozen() -> None:
    c = eosflow.EosConfig(**BASE)  # type: ignore[arg-type]
    with pytest.raises(Exception, match="frozen"):
        c.group_id = "other"  # type: ignore[misc]


def test_every_field_has_a_description() -> None:
    missing = [n for n, f in eosflow.EosConfig.model_fields.items() if not f.description]
    assert missing == []
