"""`eosflow` command-line parsing and processor loading, in process (no broker)."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import itertools
import tomllib
from pathlib import Path

import pytest

import eosflow
from eosflow._cli import _parser, config_values, main
from eosflow._config import NESTED

ROOT = Path(__file__).parents[2]
REQUIRED = [
    "--bootstrap-servers",
    "127.0.0.1:1",
    "--group-id",
    "g",
    "--input-topic",
    "in",
    "--transactional-id",
    "t",
]
_names = itertools.count()


def _config(*flags: str) -> eosflow.EosConfig:
    args = _parser().parse_args(["run", "m:P", *flags])
    return eosflow.load_config(**config_values(args))


def test_every_config_field_is_a_flag_described_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # undo argparse's line wrapping
    fields = dict(eosflow.EosConfig.model_fields)
    for nested, model in NESTED.items():  # settings objects: a group of their own flags
        del fields[nested]
        fields.update(model.model_fields)
    for name, field in fields.items():
        assert f"--{name.replace('_', '-')} " in text, name
        assert field.description and " ".join(field.description.split()) in text, name
        assert f"EOSFLOW_{name.upper()})" in text, name


def test_flags_set_fields_of_every_kind() -> None:
    c = _config(
        *REQUIRED,
        "--input-topics",
        "a, b",  # comma-separated and repeatable, under either spelling
        "--session-timeout-s",
        "10",
        "--transaction-timeout-s",
        "12",
        "--allow-transaction-timeout-over-session",
        "--no-process-ahead",
        "--max-bytes-per-txn",
        "1000",
        "--auto-offset-reset",
        "latest",
        "--dead-letter-topic",
        "dlq",
    )
    assert c.input_topics == ("in", "a", "b")
    assert c.session_timeout_s == 10 and c.transaction_timeout_s == 12
    assert c.allow_transaction_timeout_over_session is True and c.process_ahead is False
    assert c.max_bytes_per_txn == 1000 and c.auto_offset_reset == "latest"
    assert c.dead_letter_topic == "dlq"
    assert _config(*REQUIRED, "--process-ahead").process_ahead is True


def test_flags_not_given_fall_back_to_environment_then_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EOSFLOW_GROUP_ID", "env-group")
    monkeypatch.setenv("EOSFLOW_COMMIT_INTERVAL_S", "0.5")
    monkeypatch.setenv("EOSFLOW_PROCESS_AHEAD", "false")
    c = _config(*REQUIRED[:2], *REQUIRED[4:], "--commit-interval-s", "2")
    assert c.group_id == "env-group"  # no flag: the environment
    assert c.commit_interval_s == 2  # the flag over the environment
    assert c.process_ahead is False  # a bool flag not given does not override the environment
    assert c.session_timeout_s == 45  # neither: the default


def test_bad_flag_value_exits_two_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "m:P", *REQUIRED, "--session-timeout-s", "soon"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("eosflow: invalid eosflow config: ")
    assert "session_timeout_s" in err


@pytest.mark.parametrize("before", [True, False])
def test_log_level_goes_before_or_after_the_command(before: bool) -> None:
    level = ["--log-level", "debug"]
    argv = [*level, "run", "m:P"] if before else ["run", "m:P", *level]
    assert _parser().parse_args(argv).log_level == "debug"
    assert (
        _parser()
        .parse_args(["check", *REQUIRED[:2], "--input-topic", "a", "--output-topic", "b"])
        .log_level
        == "info"
    )


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    name = f"procmod_{next(_names)}_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("import eosflow\n\n" + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


CASES = {
    "needs_args": (
        "class P(eosflow.Processor):\n    def __init__(self, table, *, limit):\n        pass\n",
        "cannot be built without arguments: its __init__ needs table, limit",
    ),
    "init_raises": (
        "class P(eosflow.Processor):\n"
        "    def __init__(self):\n"
        "        raise KeyError('TABLE_URL')\n",
        "failed to build: KeyError: 'TABLE_URL'",
    ),
    "import_raises": (
        "raise RuntimeError('no table\\nat all')\n",
        "cannot import",
    ),
    "import_fails": ("import no_such_module_here\n", "ModuleNotFoundError"),
    "not_a_processor": ("class P:\n    pass\n", "is not an eosflow.Processor subclass"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_processor_that_cannot_be_built_exits_two_with_one_line(
    case: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    body, expected = CASES[case]
    target = _module(tmp_path, monkeypatch, body) + ":P"
    assert main(["run", target, *REQUIRED]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("eosflow: "), err
    assert repr(target) in err and expected in err and "Traceback" not in err
    if case == "import_raises":
        assert "RuntimeError: no table at all" in err


def test_the_package_is_typed() -> None:
    """PEP 561: eosflow ships ``py.typed`` so users' type checkers read its annotations."""
    assert (importlib.resources.files("eosflow") / "py.typed").is_file()
    listed = {str(f) for f in importlib.metadata.files("eosflow") or []}
    if "eosflow/__init__.py" in listed:  # a regular install lists its files
        assert "eosflow/py.typed" in listed
    else:  # an editable install maps the source tree; a build takes the package data
        pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
        assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["eosflow"]


# Issue 51.5: a mistyped flag is one line and exit 2, naming the closest flag -- not
# argparse's usage dump -- and a prefix of a flag is not that flag (argparse took
# `--commit-interval 1` for `--commit-interval-s 1`).
@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--commit-interval", "1"],
            "unknown flag --commit-interval; did you mean --commit-interval-s?",
        ),
        (["--sasl-pasword=x"], "unknown flag --sasl-pasword; did you mean --sasl-password?"),
        (["--group", "g"], "unknown flag --group; did you mean --group-id?"),
    ],
)
def test_a_mistyped_flag_is_one_line_naming_the_closest(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "m:P", *REQUIRED, *flags]) == 2
    err = capsys.readouterr().err
    assert err == f"eosflow: {said}\n"


# The closest flag is the command's own: `run --group` names run's --group-id, not the
# demo's --regroup (closer by letters). Caught: every command's flags matched together.
def test_the_closest_flag_is_the_commands_own(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--regrop"]) == 2
    assert capsys.readouterr().err == "eosflow: unknown flag --regrop; did you mean --regroup?\n"
    assert main(["run", "m:P", *REQUIRED, "--regrop"]) == 2
    assert "did you mean --regroup" not in capsys.readouterr().err


def test_other_argument_mistakes_are_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "required: target" in err and "usage" not in err
