"""The pytest plugin in an environment that has eosflow and pytest but not pytest-asyncio.

Installing eosflow registers its plugin (``pytest11`` entry point) for every pytest run
there, so the plugin must load without its test extra. These tests build that
environment for real: a fresh virtualenv in a temporary folder, eosflow installed from
this checkout (editable, with its dependencies) and pytest, nothing else; then they run
pytest in it. Building the venv takes a few seconds with pip's cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.builds_venv, pytest.mark.timeout(600)]


def _env() -> dict[str, str]:
    """This process's environment without what would leak the outer test run into the
    child (its import path, pytest options, the active virtualenv)."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "VIRTUAL_ENV"}
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv holding eosflow (from this checkout) and pytest, without
    pytest-asyncio; returns its python."""
    home = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    python = home / "bin" / "python"
    # the outer environment's pip installs into the new one (saves bootstrapping a pip)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-e",
            str(ROOT),
            f"pytest=={pytest.__version__}",
        ],
        check=True,
        env=_env(),
        timeout=540,
    )
    probe = subprocess.run(
        [str(python), "-c", "import pytest_asyncio"], capture_output=True, text=True, env=_env()
    )
    assert probe.returncode != 0 and "pytest_asyncio" in probe.stderr, (
        "the bare venv must not have pytest-asyncio"
    )
    return python


def _pytest_in(python: Path, folder: Path, test_file: str, source: str) -> tuple[int, str]:
    folder.mkdir()
    (folder / "pytest.ini").write_text("[pytest]\n")  # the project's own ini, not ours
    (folder / test_file).write_text(source)
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", test_file],
        cwd=folder,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_pytest_runs_in_a_project_without_pytest_asyncio(bare_venv: Path, tmp_path: Path) -> None:
    code, out = _pytest_in(
        bare_venv, tmp_path / "proj", "test_trivial.py", "def test_ok():\n    assert 1 + 1 == 2\n"
    )
    assert code == 0, out
    assert "1 passed" in out, out


def test_eosflow_fixture_without_pytest_asyncio_says_what_to_install(
    bare_venv: Path, tmp_path: Path
) -> None:
    source = "def test_uses_the_cluster(eosflow_cluster):\n    pass\n"
    code, out = _pytest_in(bare_venv, tmp_path / "proj", "test_needs_cluster.py", source)
    assert code == 1, out  # the test errors; pytest itself ran
    assert "ERROR test_needs_cluster.py::test_uses_the_cluster" in out, out
    line = "the eosflow_cluster fixture needs pytest-asyncio: pip install pytest-asyncio"
    assert line in out, out
    assert "Traceback" not in out, out
