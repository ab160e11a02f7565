"""``eosflow run`` and ``eosflow check`` are production paths: they must not import the
test kit (``eosflow.testing``: the test cluster, its fixtures and launchers)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from eosflow._cli import main
code = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.startswith("eosflow.testing"))
print("LOADED", loaded, "EXIT", code)
"""

COMMON = ["--bootstrap-servers", "127.0.0.1:1"]


@pytest.mark.parametrize(
    "argv",
    [
        [
            "run",
            "examples.passthrough:PassThrough",
            *COMMON,
            "--group-id",
            "g",
            "--input-topic",
            "in",
            "--transactional-id",
            "t",
        ],
        ["check", *COMMON, "--input-topic", "in", "--output-topic", "out"],
    ],
    ids=["run", "check"],
)
def test_run_and_check_do_not_import_the_test_kit(argv: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("LOADED")), None)
    assert line is not None, out.stdout + out.stderr
    assert line.startswith("LOADED [] EXIT 1"), line  # ran (and failed: nothing listens)
