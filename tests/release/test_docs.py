"""The reference site builds with warnings as errors, and what it generates is complete.

The build is MkDocs with ``--strict`` (a broken link, a missing page, an API name that
does not resolve: each fails it). The settings and command-line pages are generated
from eosflow itself when the site is built (``docs/_hooks.py``); these tests read the
built HTML, so a setting left out of the page, or help text that differs from the
command's, fails here.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import eosflow
from eosflow._cli import _parser, commands
from eosflow._config import NESTED

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "index.html",
    "guarantees/index.html",
    *(
        f"howto/{n}/index.html"
        for n in ("service", "embedded", "state", "spark", "security", "testing", "operations")
    ),
    *(
        f"reference/{n}/index.html"
        for n in ("api", "settings", "errors", "cli", "testing", "spark")
    ),
    "design/index.html",
    "changelog/index.html",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "No module named mkdocs" not in built.stderr, "install the docs extra: .[docs]"
    assert built.returncode == 0, built.stderr[-5000:]
    return out


def _text(site: Path, page: str) -> str:
    """The page's text: tags dropped, entities decoded, whitespace folded."""
    raw = (site / page).read_text()
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).split())


def test_every_page_is_built(site: Path) -> None:
    assert [p for p in PAGES if not (site / p).is_file()] == []


def _rows(site: Path, page: str) -> dict[str, list[str]]:
    """Each table row of the page by its first cell: the cells' text."""
    raw = (site / page).read_text()
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", raw, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        text = [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in cells]
        if text:
            rows[text[0]] = text
    return rows


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    return str(value).lower() if isinstance(value, bool) else repr(value)


def test_the_settings_page_has_a_row_per_setting(site: Path) -> None:
    """Every setting has its row: name, type, default, variable, flag, description --
    the default, variable and flag as the model and ``eosflow run`` have them."""
    from eosflow.spark import SparkSettings

    rows = _rows(site, "reference/settings/index.html")
    wrong = []
    for model in [eosflow.EosConfig, *NESTED.values(), SparkSettings]:
        prefix = model.model_config.get("env_prefix", "")
        for name, field in model.model_fields.items():
            if model is eosflow.EosConfig and name in NESTED:
                continue  # their own tables
            flag = "—" if model is SparkSettings else "--" + name.replace("_", "-")
            row = rows.get(name)
            if (
                row is None
                or row[2] != _default(field)
                or row[3] != f"{prefix}{name.upper()}"
                or flag not in re.split(r"\s*,\s*", row[4])
                or (field.description or "") not in row[5]
            ):
                wrong.append((name, row))
    assert wrong == []


def test_the_command_line_page_is_the_commands_own_help(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    parser = _parser()
    text = _text(site, "reference/cli/index.html")
    helps = [parser.format_help(), *(p.format_help() for p in commands(parser).values())]
    assert all(" ".join(h.split()) in text for h in helps)


def test_the_api_page_documents_every_public_name(site: Path) -> None:
    raw = (site / "reference/api/index.html").read_text()
    raw += (site / "reference/errors/index.html").read_text()
    missing = [n for n in eosflow.__all__ if n != "__version__" and f'id="eosflow.{n}"' not in raw]
    assert missing == []


def test_the_test_kit_and_spark_pages_document_every_public_name(site: Path) -> None:
    import eosflow.spark
    import eosflow.testing

    found = {
        "testing": (site / "reference/testing/index.html").read_text(),
        "spark": (site / "reference/spark/index.html").read_text(),
    }
    missing = [
        f"{mod}.{n}"
        for mod, names in (("testing", eosflow.testing.__all__), ("spark", eosflow.spark.__all__))
        for n in names
        if f'id="eosflow.{mod}.{n}"' not in found[mod]
    ]
    assert missing == []


def test_the_errors_page_draws_the_tree(site: Path) -> None:
    text = (site / "reference/errors/index.html").read_text()
    assert "├── FatalError" in html.unescape(text)


def test_the_changelog_page_has_this_version(site: Path) -> None:
    assert f"[{eosflow.__version__}]" in _text(site, "changelog/index.html")


@pytest.mark.builds_venv
@pytest.mark.timeout(900)
def test_the_docs_build_from_a_fresh_clone_with_the_docs_extra_alone(tmp_path: Path) -> None:
    """``bash scripts/docs``, as README gives it, in a copy of the checkout's tracked files
    with no venv: it makes its own with the docs extra and builds the site. Neither pytest
    nor PySpark is installed there (the reference pages once imported both: the build
    stopped on 'No module named pytest', then on 'needs the spark extra')."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    clone = tmp_path / "clone"
    for name in filter(None, tracked.split("\0")):
        if (ROOT / name).is_file():  # a file deleted in the working tree is not copied
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            (clone / name).write_bytes((ROOT / name).read_bytes())
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_ADDOPTS"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    built = subprocess.run(
        ["bash", "scripts/docs"], cwd=clone, capture_output=True, text=True, env=env, timeout=840
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert (clone / "site" / "reference" / "settings" / "index.html").is_file()
    for module in ("pytest", "pyspark"):
        probe = subprocess.run(
            [str(clone / ".venv" / "bin" / "python"), "-c", f"import {module}"],
            capture_output=True,
            env=env,
        )
        assert probe.returncode != 0, f"{module} is installed: the test proves nothing"
