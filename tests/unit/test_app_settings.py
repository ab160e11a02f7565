"""A processor's own settings (``eosflow.AppSettings``): read from ``EOSFLOW_APP_*``
variables and ``eosflow run --set`` flags, with eosflow's one-line errors; a name no
settings class has is refused, not ignored. The comment above each test names the
mutation that made it fail."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

import eosflow
from eosflow._cli import main
from eosflow._config import app_overrides, check_app_settings

REQUIRED = ["--bootstrap-servers", "127.0.0.1:1", "--group-id", "g", "--input-topic", "in"]
REQUIRED += ["--transactional-id", "t"]
_names = itertools.count()


class Shop(eosflow.AppSettings):
    output: str = "totals"
    window_s: float = 300.0


# Read from EOSFLOW_APP_<FIELD>, a value given in code winning; a bad value or an
# unknown name is one line naming the field.
def test_settings_read_the_environment_and_say_what_is_wrong(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EOSFLOW_APP_WINDOW_S", "60")
    assert (Shop().output, Shop().window_s) == ("totals", 60.0)
    assert Shop(window_s=5).window_s == 5.0
    monkeypatch.setenv("EOSFLOW_APP_WINDOW_S", "soon")
    with pytest.raises(eosflow.ConfigError, match=r"^invalid app settings: window_s: ") as e:
        Shop()
    assert "\n" not in str(e.value)
    with pytest.raises(eosflow.ConfigError, match=r"window_z.*did you mean window_s"):
        Shop(window_z=1)  # type: ignore[call-arg]


# ``--set`` puts its values where the settings read them. A name that no settings class
# built has -- as a flag or as a variable -- is refused naming the closest field.
# Caught: the check skipped (a misspelt --set was ignored silently).
def test_set_flags_reach_the_settings_and_unknown_names_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EOSFLOW_APP_WINDOW_S", raising=False)
    flags = app_overrides(["window_s=30", "output=a=b"])
    try:
        assert flags == {"window_s": "30", "output": "a=b"}
        assert (Shop().window_s, Shop().output) == (30.0, "a=b")
        check_app_settings(flags, os.environ)  # both known: no error
        with pytest.raises(eosflow.ConfigError, match=r"^--set windows: .*did you mean window_s"):
            check_app_settings(["windows"], {})
        with pytest.raises(eosflow.ConfigError, match=r"^EOSFLOW_APP_OUTPT: .*did you mean output"):
            check_app_settings([], {"EOSFLOW_APP_OUTPT": "x"})
    finally:
        for name in flags:
            os.environ.pop("EOSFLOW_APP_" + name.upper(), None)
    with pytest.raises(eosflow.ConfigError, match=r"--set 'window_s': expected name=value"):
        app_overrides(["window_s"])


# eosflow's own settings let EOSFLOW_APP_* through (they are the processor's).
def test_eosflow_config_lets_app_variables_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOSFLOW_APP_ANYTHING", "1")
    eosflow.load_config(bootstrap_servers="b:1", group_id="g", input_topics=("in",),
                        transactional_id="t")  # fmt: skip


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    name = f"appset_{next(_names)}_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("import eosflow\n\n" + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


PROCESSOR = """
class P(eosflow.Processor):
    class Settings(eosflow.AppSettings):
        limit: int = 10

    def __init__(self):
        self.settings = self.Settings()
"""


# eosflow run: a misspelt --set, or a value that does not fit, exits 2 with one line
# before anything connects.
@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("limt=3", "--set limt: no such app setting; did you mean limit?"),
        ("limit=many", "invalid app settings: limit: "),
    ],
)
def test_eosflow_run_refuses_a_bad_set_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    said: str,
) -> None:
    target = _module(tmp_path, monkeypatch, PROCESSOR) + ":P"
    name = flag.partition("=")[0]
    monkeypatch.setenv("EOSFLOW_APP_" + name.upper(), "")  # restored after the test
    assert main(["run", target, *REQUIRED, "--set", flag]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
