"""The release as a user installs it, not the checkout.

``python -m build`` makes the sdist, and the wheel from the sdist (so a file the sdist
leaves out is missing from the wheel too). The wheel is installed into an empty
virtualenv with pytest and pytest-asyncio, nothing else, and eosflow runs from there:
``eosflow --version``, every module imported, the public-API tests, the demo. A file
left out of the package (``py.typed``, a module, the test kit the demo runs on) fails
here instead of on a user's machine. Building and installing take ~30 s with pip's
cache; the demo ~10 s.
"""

from __future__ import annotations

import ast
import asyncio
import email
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

import eosflow

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = {
    *("bench", "dev", "docs", "metrics", "otel", "postgres", "schemas", "spark"),
    *("spark-connect", "test"),
}
# installed for real into the wheel's venv, each checked by importing what it brings;
# the others (tooling: bench, dev, docs) are resolved by pip without installing
INSTALLED = {
    "spark": ["pyspark", "pyarrow"],
    "spark-connect": ["pyspark.sql.connect.session"],
    "metrics": ["prometheus_client"],
    "otel": ["opentelemetry.trace"],
    "postgres": ["asyncpg"],
    "schemas": ["httpx", "fastavro", "jsonschema", "google.protobuf"],
    "test": ["pytest_asyncio", "testcontainers"],
}
BUILT = (
    "*.so",
    "_hot.c",
    "_stores.c",
    "_drive.c",
)  # the extensions as the checkout's install builds them
NO_EXTRA = "does not provide the extra"  # pip only warns about an extra that is not there
# the modules that need an extra: importing them without it fails, naming the package
OPTIONAL = {
    "pyspark",
    "prometheus_client",
    "opentelemetry",
    "testcontainers",
    "asyncpg",
}

pytestmark = [pytest.mark.builds_venv, pytest.mark.timeout(900)]


def _env() -> dict[str, str]:
    """This environment without what would leak the outer test run into a child."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "VIRTUAL_ENV"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, env=_env(), timeout=timeout
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, sdist), built from a copy of the checkout's package sources (the build
    writes its egg-info next to pyproject.toml; the checkout stays untouched)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.py", "README.md", "CHANGELOG.md", "MANIFEST.in"):
        shutil.copy(ROOT / name, src / name)
    shutil.copy(ROOT / "LICENSE", src / "LICENSE")
    built_here = shutil.ignore_patterns("__pycache__", *BUILT)
    shutil.copytree(ROOT / "eosflow", src / "eosflow", ignore=built_here)
    out = tmp_path_factory.mktemp("dist")
    built = _run([sys.executable, "-m", "build", "--outdir", str(out), str(src)], src, 600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(out.iterdir())
    return wheels[0], sdists[0]


@pytest.fixture(scope="module")
def venv(dist: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty virtualenv with the wheel and the extras users install (``INSTALLED``);
    returns its bin/."""
    home = tmp_path_factory.mktemp("wheel-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    python = home / "bin" / "python"
    # the outer environment's pip installs into the new one (saves bootstrapping a pip)
    installed = _run(
        [
            *(sys.executable, "-m", "pip", "--python", str(python), "install"),
            *("--quiet", "--disable-pip-version-check"),
            f"{dist[0]}[{','.join(sorted(INSTALLED))}]",
        ],
        home,
        600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert NO_EXTRA not in installed.stderr, installed.stderr
    return home / "bin"


def _package_files() -> set[str]:
    """The package's sources in the checkout (not what its install built there)."""
    pkg = ROOT / "eosflow"
    return {
        "eosflow/" + p.relative_to(pkg).as_posix()
        for p in pkg.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and not any(p.match(pattern) for pattern in BUILT)
    }


def test_the_wheel_holds_every_module_and_py_typed(dist: tuple[Path, Path]) -> None:
    names = set(zipfile.ZipFile(dist[0]).namelist())
    ours = {n for n in names if n.startswith("eosflow/")}
    assert "eosflow/py.typed" in ours  # PEP 561: type checkers read eosflow's annotations
    assert "eosflow/_console/static/console.js" in ours  # the console's page, as data
    # the compiled hot paths, built for this Python and platform (beside their Cython
    # source and the stub type checkers read)
    compiled = {n for n in ours if n.endswith(".so")}
    assert {n.split(".")[0] for n in compiled} == {
        "eosflow/_native/_hot",
        "eosflow/_native/_stores",
        "eosflow/_native/_drive",
    }, ours
    assert ours - compiled == _package_files()  # nothing missing, nothing from elsewhere
    info = {n.split("/", 1)[0] for n in names - ours}
    assert info == {f"eosflow-{eosflow.__version__}.dist-info"}, info  # no tests/, testbed/
    # what only the project runs (the fault matrix, the PKI, the Spark clusters: testbed/)
    # stays out of the wheel, under any folder (issue 52: it was eosflow/testing/_project/)
    project_only = {p.name for p in (ROOT / "testbed").glob("_*.py")} - {"__init__.py"}
    assert project_only, "testbed/ moved: say where what only the project runs is now"
    shipped = {n for n in ours if n.rsplit("/", 1)[-1] in project_only or "/_project/" in n}
    assert shipped == set(), sorted(shipped)


def test_the_sdist_holds_the_sources_the_changelog_and_the_license(
    dist: tuple[Path, Path],
) -> None:
    top = f"eosflow-{eosflow.__version__}/"
    with tarfile.open(dist[1]) as tar:
        names = {n.removeprefix(top) for n in tar.getnames()}
    assert {"pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE"} <= names
    assert _package_files() <= names


def test_the_wheel_declares_its_extras_and_entry_points(dist: tuple[Path, Path]) -> None:
    with zipfile.ZipFile(dist[0]) as whl:
        info = f"eosflow-{eosflow.__version__}.dist-info/"
        meta = email.message_from_bytes(whl.read(info + "METADATA"))
        entry_points = whl.read(info + "entry_points.txt").decode()
    assert meta["Version"] == eosflow.__version__
    assert set(meta.get_all("Provides-Extra") or []) == EXTRAS
    # PEP 639: the license by its SPDX name, and its text in the wheel
    assert (meta["License-Expression"], meta.get_all("License-File")) == ("Apache-2.0", ["LICENSE"])
    with zipfile.ZipFile(dist[0]) as whl:
        text = whl.read(info + "licenses/LICENSE").decode()
    assert text == (ROOT / "LICENSE").read_text() and "Apache License" in text
    assert "eosflow = eosflow._cli:main" in entry_points  # the command
    assert "eosflow = eosflow.testing.pytest_plugin" in entry_points  # the pytest plugin


def test_the_installed_extras_bring_what_they_promise(venv: Path, tmp_path: Path) -> None:
    modules = [m for ms in INSTALLED.values() for m in ms]
    script = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    done = _run([str(venv / "python"), "-c", script, *modules], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_tooling_extras_resolve(dist: tuple[Path, Path], venv: Path) -> None:
    """pip resolves the extras not installed above for the wheel (a dry run)."""
    for extra in sorted(EXTRAS - set(INSTALLED)):
        report = _run(
            [
                *(sys.executable, "-m", "pip", "--python", str(venv / "python"), "install"),
                *("--dry-run", "--quiet", "--disable-pip-version-check", "--report", "-"),
                f"eosflow[{extra}] @ {dist[0].as_uri()}",
            ],
            venv,
            600,
        )
        assert report.returncode == 0, (extra, report.stderr[-2000:])
        assert NO_EXTRA not in report.stderr, (extra, report.stderr)
        wanted = {i["metadata"]["name"].lower() for i in json.loads(report.stdout)["install"]}
        assert wanted, extra  # something to install: the venv does not have the tooling


def test_the_spark_extra_alone_brings_what_sparks_arrow_path_needs(
    dist: tuple[Path, Path], tmp_path: Path
) -> None:
    """``eosflow[spark]`` alone, into an empty venv (a dry run), brings pandas and NumPy
    with PyArrow: Spark 4 makes Python UDFs Arrow-optimized by default, and without
    pandas it falls back, warning "Arrow optimization failed to enable because PyArrow
    or Pandas is not installed" on every UDF (issue 51.11: the demo's Spark variant in
    a venv with that extra alone). Fails with the extra as pyspark and pyarrow only."""
    home = tmp_path / "empty"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    report = _run(
        [
            *(sys.executable, "-m", "pip", "--python", str(home / "bin" / "python"), "install"),
            *("--dry-run", "--quiet", "--disable-pip-version-check", "--report", "-"),
            f"eosflow[spark] @ {dist[0].as_uri()}",
        ],
        tmp_path,
        600,
    )
    assert report.returncode == 0, report.stderr[-2000:]
    wanted = {i["metadata"]["name"].lower() for i in json.loads(report.stdout)["install"]}
    assert {"pyspark", "pyarrow", "pandas", "numpy"} <= wanted, sorted(wanted)


def test_eosflow_runs_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    probe = _run(
        [
            str(venv / "python"),
            "-c",
            "import eosflow, json; print(json.dumps([eosflow.__file__, eosflow.__version__]))",
        ],
        tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    where, version = json.loads(probe.stdout)
    assert Path(where).is_relative_to(venv.parent) and version == eosflow.__version__
    shown = _run([str(venv / "eosflow"), "--version"], tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith(f"eosflow {version} ("), shown


def test_every_module_imports_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    """Every module of the installed package imports, or fails only for want of an
    extra the venv does not have (the test kit's container helper, metrics, tracing,
    the PostgreSQL sink)."""
    script = (
        "import importlib, json, pkgutil, eosflow\n"
        "done, failed = ['eosflow'], {}\n"
        "for m in pkgutil.walk_packages(eosflow.__path__, 'eosflow.'):\n"
        "    try:\n"
        "        importlib.import_module(m.name)\n"
        "        done.append(m.name)\n"
        "    except ImportError as exc:\n"
        "        failed[m.name] = [getattr(exc, 'name', None) or '', str(exc)]\n"
        "print(json.dumps([done, failed]))\n"
    )
    done = _run([str(venv / "python"), "-c", script], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    imported, failed = json.loads(done.stdout)
    missing = {m: text for m, (name, text) in failed.items() if name.split(".")[0] not in OPTIONAL}
    assert missing == {}
    modules = {
        f.removesuffix(".pyx").removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        for f in _package_files()
        if f.endswith((".py", ".pyx"))
    }
    assert modules == set(imported) | set(failed)  # the walk reached every module
    assert {"eosflow._native._hot", "eosflow._native._stores", "eosflow._native._drive"} <= set(
        imported
    )  # built in


def test_the_public_api_tests_pass_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    source = (ROOT / "tests" / "unit" / "test_public_api.py").read_text()
    tests = [
        n.name
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    ]
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the checkout's settings
    (tmp_path / "test_public_api.py").write_text(source)
    done = _run(
        [str(venv / "python"), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs"],
        tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"{len(tests)} passed" in done.stdout and "skipped" not in done.stdout, done.stdout


def test_the_demo_runs_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    done = _run([str(venv / "eosflow"), "demo"], tmp_path, 300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "EXACTLY ONCE: OK" in done.stdout, done.stdout[-3000:]
    # the demo tells eosflow's story: the libraries' log lines stay in its log files
    shown = (done.stdout + done.stderr).replace("aiokafka's lines included", "")
    assert "aiokafka" not in shown, shown


def _readme_quickstart() -> tuple[str, list[str]]:
    """README's quickstart: the processor's module and the ``eosflow run`` command (its
    arguments, line continuations joined), exactly as a reader copies them."""
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Quickstart")
    part = text[start : text.index("\n## ", start + 1)]
    code = part.split("```python\n", 1)[1].split("```", 1)[0]
    shell = part.split("```sh\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    return code, shell.split()


async def test_the_readme_quickstart_runs_from_a_fresh_folder(venv: Path, tmp_path: Path) -> None:
    """A fresh folder holding only ``mymodule.py`` (README's code), and README's command
    run there with the wheel's ``eosflow`` -- only the bootstrap servers are the test
    cluster's: every word comes out upper-cased exactly once, and SIGTERM exits 0. Until
    ``eosflow run`` looked in the current folder, this failed: "cannot import 'mymodule'"."""
    from eosflow.testing import FakeCluster, check_exactly_once, read_topic

    code, argv = _readme_quickstart()
    assert argv[:3] == ["eosflow", "run", "mymodule:Upper"], argv
    (tmp_path / "mymodule.py").write_text(code)
    async with FakeCluster() as c:
        c.create_topic("words", 3)
        c.create_topic("words-upper", 3)
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
        await p.start()
        for i in range(300):
            await p.send("words", f"word {i}".encode(), key=f"k{i}".encode())
        await p.stop()
        argv[argv.index("--bootstrap-servers") + 1] = c.bootstrap_servers
        proc = await asyncio.create_subprocess_exec(
            str(venv / "eosflow"),
            *argv[1:],
            cwd=tmp_path,
            env=_env(),
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            for _ in range(600):  # up to 60 s
                if sum(c.committed("upper").values()) == 300 or proc.returncode is not None:
                    break
                await asyncio.sleep(0.1)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()[-3000:]
        report = await check_exactly_once(
            c.bootstrap_servers, "words", "words-upper", group_id="upper"
        )
        assert report.ok, report.summary()
        values = sorted(v for _, _, _, v in await read_topic(c.bootstrap_servers, "words-upper"))
        assert values == sorted(f"WORD {i}".encode() for i in range(300))


def test_the_try_it_page_runs_as_written(dist: tuple[Path, Path], tmp_path: Path) -> None:
    """docs/howto/try.md's script, run by bash as a reader pastes it into an empty
    folder holding the wheel -- its own venv, the test cluster, the quickstart as a
    service, `eosflow produce` and `eosflow consume`, the SIGTERMs -- only the wheel's
    file name is the one built here. `consume` must print the two words upper-cased,
    and every step succeed (``set -e``)."""
    page = (ROOT / "docs" / "howto" / "try.md").read_text()
    part = page[page.index("## The whole run") :]
    script = part.split("```sh\n", 1)[1].split("\n```", 1)[0]
    assert "eosflow-0.1.0-*.whl" in script  # the one wheel in the folder, whatever its tags
    shutil.copy(dist[0], tmp_path / dist[0].name)
    env = _env()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.splitlines() == ["HELLO", "EXACTLY ONCE"], done.stdout
