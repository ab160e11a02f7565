"""The test tree collects: pytest's default import mode imports each test file by its
base name, so two files of one name anywhere under tests/ stop the whole run at
collection (CI ran no test when tests/runtime/ and tests/contract/ both held
test_transactions_v2.py)."""

from __future__ import annotations

import collections
import pathlib

TESTS = pathlib.Path(__file__).parents[1]


def test_no_two_test_files_share_a_name() -> None:
    names = collections.Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []
