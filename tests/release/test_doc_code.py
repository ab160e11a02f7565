"""The Python in README.md and in the docs runs as written.

Per file, its ```python blocks run in order, in one namespace, in a child process,
against a test cluster this test starts: ``kafka:9092`` in them is replaced by its
address, and the topic ``words`` holds a few records, a tombstone among them. Then
every ``Processor`` the blocks defined runs in an ``EosApp`` over those records until
they are committed, so a
processor that raises, or an API the text uses wrongly, fails here. (Spark processors
are only defined: the Spark examples' own tests run them; so are sinks, which need a
database and JSON values: ``tests/sinks/test_table_sink.py`` runs the same
declarations; and so are processors whose topics, tables or stores are kept in a
schema registry, which ``tests/genuine/test_schemas_interop.py``,
``test_schemas_tables.py`` and ``test_schemas_stores.py`` run, processors declared alike
against a genuine one.) The docs' longer examples are files
of ``examples/``, shown by the docs build and run by their own tests.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from eosflow.testing import FakeCluster

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
# a tombstone (no value) among them: the code a page shows survives any record
WORDS = [b"alpha beta", b"gamma", None, b"delta alpha", b"beta"]

EXERCISE = """
import asyncio as _asyncio
import eosflow as _eosflow


async def _exercise(bootstrap: str, records: int) -> None:
    found = [
        v for v in list(globals().values())
        if isinstance(v, type) and issubclass(v, _eosflow.Processor)
        and v.__module__ == "__main__"
        and not any(c.__name__ in ("SparkProcessor", "PostgresSink") for c in v.__mro__)
    ]
    for cls in found:
        sides = [s for t in cls.topics.values() for s in (t.key, t.value)]
        sides += [t.serde for t in (getattr(cls, "tables", None) or {}).values()]
        sides += list((getattr(cls, "stores", None) or {}).values())
        if any(isinstance(s, (_eosflow.Avro, _eosflow.JsonSchema)) for s in sides):
            print("REGISTRY", cls.__name__, flush=True)  # defined only: it needs a registry
            continue
        config = _eosflow.EosConfig(
            bootstrap_servers=bootstrap, group_id="doc-" + cls.__name__,
            input_topics=("words",), transactional_id="doc-" + cls.__name__,
            session_timeout_s=6, transaction_timeout_s=5,
        )
        async with _eosflow.EosApp(cls(), config) as app:
            async with _asyncio.timeout(30):
                while app.stats.records < records or app.in_transaction:
                    if app.failure is not None:
                        raise app.failure
                    await _asyncio.sleep(0.05)
        print("RAN", cls.__name__, app.stats.records, app.stats.dead_lettered, flush=True)
"""


def _blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


PAGES_WITH_CODE = [p for p in PAGES if _blocks(p)]


def test_the_pages_with_code_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES_WITH_CODE}
    assert {"README.md", "docs/index.md", "docs/howto/embedded.md"} <= names, names


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.relative_to(ROOT).as_posix())
async def test_the_code_of_a_page_runs(
    page: Path, eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    c.create_topic("words", 2)
    producer = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await producer.start()
    for i, value in enumerate(WORDS):
        await producer.send("words", value, key=f"k{i}".encode())
    await producer.stop()

    blocks = [b.replace("kafka:9092", c.bootstrap_servers) for b in _blocks(page)]
    script = "\n\n".join([*blocks, EXERCISE])
    script += f"\n_asyncio.run(_exercise({c.bootstrap_servers!r}, {len(WORDS)}))\n"
    (tmp_path / "page.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EOSFLOW_", "PYTEST"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "page.py",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    ran = re.findall(r"^RAN (\w+) (\d+) (\d+)$", out.decode(), re.M)
    registry = re.findall(r"^REGISTRY (\w+)$", out.decode(), re.M)
    defined = re.findall(r"^class (\w+)\(eosflow\.Processor\)", "\n".join(blocks), re.M)
    assert sorted([*(name for name, _n, _d in ran), *registry]) == sorted(defined)
    assert all(int(n) == len(WORDS) and d == "0" for _name, n, d in ran), ran


def test_the_testing_howto_example_passes(tmp_path: Path) -> None:
    """examples/test_shout.py, which the "Test a processor" page shows, run by pytest
    as a user's project would (only the plugin installed with eosflow, no conftest)."""
    import subprocess

    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    shutil.copy(ROOT / "examples" / "test_shout.py", tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_shout.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")},
    )
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:]
