"""One version, said the same everywhere: eosflow/_version.py, the installed metadata
(pyproject.toml reads the file), ``eosflow --version`` and CHANGELOG.md's newest release.
And the command's help is plain text: argparse prints it as written, so reST markup from
docstrings (double backquotes) would reach the terminal as is."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest

import eosflow
from eosflow._cli import _parser, commands, main

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ["run", "produce", "consume", "check", "status", "console", "demo"]


def test_the_installed_metadata_has_the_package_version() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", eosflow.__version__)
    assert version("eosflow") == eosflow.__version__


def test_the_changelog_names_this_version_as_its_newest_release() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert headings[0] == ("Unreleased", ""), "changes not yet released go under Unreleased"
    name, day = headings[1]
    assert name == eosflow.__version__ and day, headings[:3]


def test_version_flag_prints_eosflow_aiokafka_and_python(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"eosflow {eosflow.__version__} (aiokafka {version('aiokafka')}, ")
    assert re.search(r"Python 3\.\d+\.\d+\)$", line), line


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_is_plain_text(command: str | None) -> None:
    parser = _parser()
    if command is not None:
        parser = commands(parser)[command]
    text = parser.format_help()
    assert text.strip()
    markup = re.findall(r"``|:(?:class|func|meth|attr|mod):`|\*\*", text)
    assert markup == [], text


def test_the_install_commands_name_this_versions_wheel() -> None:
    """README.md and the docs name the wheel's file (``python -m build`` writes it so);
    a release that forgets to update them fails here."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {
        (p.name, v)
        for p in pages
        for v in re.findall(r"eosflow-(\d+\.\d+\.\d+)-\*\.whl", p.read_text())
    }
    assert {name for name, _v in named} >= {"README.md", "index.md"}
    assert {v for _name, v in named} == {eosflow.__version__}, named
