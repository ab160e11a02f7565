import re
from pathlib import Path

import pytest

import eosflow
from eosflow import load_config
from eosflow._config import check_environment

BASE = dict(bootstrap_servers="h:1", group_id="g", input_topics=("a",), transactional_id="t")


def test_defaults_follow_the_documented_design() -> None:
    c = eosflow.EosConfig(**BASE)  # type: ignore[arg-type]
    assert c.commit_interval_s == 0.1 and c.post_commit_delay_s == 0.2
    assert c.require_stable_fetch_offsets is True
    assert c.transaction_timeout_s < c.session_timeout_s


def test_the_protocols_follow_the_cluster_unless_told() -> None:
    c = eosflow.EosConfig(**BASE)  # type: ignore[arg-type]
    assert (c.group_protocol, c.transactions_v2) == ("auto", "auto")


@pytest.mark.parametrize(
    ("given", "taken"),
    [
        (True, "on"),
        (False, "off"),
        ("true", "on"),
        (" TRUE ", "on"),
        ("yes", "on"),
        ("1", "on"),
        ("0", "off"),
        ("no", "off"),
        ("On", "on"),
        ("AUTO", "auto"),
        ("off", "off"),
    ],
)
def test_transactions_v2_takes_on_off_auto_and_booleans(given: object, taken: str) -> None:
    c = eosflow.EosConfig(**BASE, transactions_v2=given)  # type: ignore[arg-type]
    assert c.transactions_v2 == taken


def test_transactions_v2_refuses_other_words() -> None:
    with pytest.raises(ValueError, match="transactions_v2"):
        eosflow.EosConfig(**BASE, transactions_v2="sometimes")  # type: ignore[arg-type]


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


def test_commit_interval_must_be_below_transaction_timeout() -> None:
    """A transaction open longer than the broker's timeout is aborted by the broker: an
    interval past it would abort every transaction the app starts."""
    with pytest.raises(eosflow.ConfigError, match=r"commit_interval_s \(5.0\) must be below"):
        load_config(**BASE, transaction_timeout_s=5, commit_interval_s=5)
    assert load_config(**BASE, transaction_timeout_s=5, commit_interval_s=4.9).commit_interval_s


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


def test_unknown_setting_in_the_environment_names_the_closest_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EOSFLOW_SESSION_TIMEOUT", "10")
    want = "^unknown setting EOSFLOW_SESSION_TIMEOUT; did you mean EOSFLOW_SESSION_TIMEOUT_S\\?$"
    with pytest.raises(eosflow.ConfigError, match=want):
        load_config(**BASE)
    with pytest.raises(eosflow.ConfigError, match=want):  # embedded users too
        eosflow.EosConfig(**BASE)  # type: ignore[arg-type]
    monkeypatch.delenv("EOSFLOW_SESSION_TIMEOUT")
    monkeypatch.setenv("eosflow_xyzzy", "1")  # read case-insensitively, so checked so too
    with pytest.raises(eosflow.ConfigError, match=r"^unknown setting eosflow_xyzzy; see"):
        load_config(**BASE)


def test_other_eosflow_variables_are_let_through(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "EOSFLOW_TEST_BOOTSTRAP",
        "EOSFLOW_TEST_KAFKA_IMAGE",
        "EOSFLOW_BENCH_BOOTSTRAP",
        "EOSFLOW_SPARK_MASTER",
        "EOSFLOW_SPARK_JOB_TIMEOUT_S",
        "EOSFLOW_EXTRAS",
    ):
        monkeypatch.setenv(var, "x")
    monkeypatch.setenv("EOSFLOW_GROUP_ID", "from-env")
    assert eosflow.EosConfig(**{**BASE, "group_id": "g"}).group_id == "g"  # type: ignore[arg-type]
    assert load_config(**{k: v for k, v in BASE.items() if k != "group_id"}).group_id == "from-env"


ROOT = Path(__file__).parents[2]
VAR = r"EOSFLOW_[A-Z0-9_]+"
MISSPELT = {"EOSFLOW_SESSION_TIMEOUT", "EOSFLOW_SASL_PASWORD"}  # set on purpose by tests


def test_every_eosflow_variable_the_project_names_is_a_field_or_allowed() -> None:
    """A new EOSFLOW_* variable read outside EosConfig must join OTHER_ENV_VARS, or
    every EosConfig built where it is set would fail."""
    names: set[str] = set()
    for top in ("eosflow", "tests", "scripts", "benchmarks", "examples", "docs"):
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix in ("", ".py", ".md", ".sh", ".toml"):
                names.update(re.findall(VAR, path.read_text()))
    names.update(re.findall(VAR, (ROOT / "README.md").read_text()))
    names = {n for n in names if not n.endswith("_")}  # namespaces named in prose
    names -= MISSPELT
    assert "EOSFLOW_TEST_BOOTSTRAP" in names and "EOSFLOW_EXTRAS" in names  # the scan works
    check_environment(dict.fromkeys(names, "x"))


# Issue 51.5: in code too, a mistyped name is a ConfigError of one line naming the
# closest field (docs/howto/embedded.md promises it), not pydantic's ValidationError;
# a nested settings object's name is checked against that object's fields.
def test_a_mistyped_name_in_code_is_one_line_naming_the_closest() -> None:
    base = dict(
        bootstrap_servers="k:9092", group_id="g", input_topics=("in",), transactional_id="t"
    )
    with pytest.raises(eosflow.ConfigError) as caught:
        eosflow.EosConfig(**base, comit_interval_s=1)  # type: ignore[call-arg]
    assert str(caught.value) == (
        "invalid eosflow config: comit_interval_s: unknown setting; did you mean commit_interval_s?"
    )
    with pytest.raises(eosflow.ConfigError, match="did you mean sasl_password") as caught:
        eosflow.EosConfig(**base, security={"sasl_pasword": "hunter2"})  # type: ignore[arg-type]
    assert "\n" not in str(caught.value) and "hunter2" not in str(caught.value)
    with pytest.raises(eosflow.ConfigError, match="metrics_port"):
        eosflow.OpsSettings(metrics_prot=9000)  # type: ignore[call-arg]
