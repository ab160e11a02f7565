"""The fault matrix in CI: every request the runtime sends, every fault class, both modes.

The full product of requests x faults x modes (``eosflow.testing._matrix``) takes longer
than CI should; ``python -m benchmarks fault-sweep`` runs it and prints every outcome.
Here runs the cover ``CI_COVER``: in each mode every request once and every fault class
at least once. A case passes when the instance finished all input (``committed-all``,
``recovered``) or stopped with an eosflow error (``fatal``), and the output holds every
input position below the committed offsets exactly once and none past them.

- survive: ``EosApp`` in this process against the test cluster;
- kill: ``eosflow run`` child processes, SIGKILLed at the fault's first hit and restarted.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eosflow.testing._matrix import (
    CI_COVER,
    FAULT_CLASSES,
    MODES,
    REQUESTS,
    Case,
    ci_cases,
    faults_for,
    skipped,
)
from eosflow.testing._matrix_run import run_case

CASES = ci_cases()


def test_the_cover_has_every_request_and_every_fault_class_in_both_modes() -> None:
    for mode in MODES:
        in_mode = [c for c in CASES if c.mode == mode]
        assert sorted(c.request.name for c in in_mode) == sorted(r.name for r in REQUESTS)
        assert {c.fault.fault_class for c in in_mode} == set(FAULT_CLASSES), mode
    assert set(CI_COVER) == set(MODES)


def test_every_request_gets_every_fault_kafka_can_give_it() -> None:
    # the network faults and the delay apply to every request; only error codes a
    # request can never get from Kafka are left out (see ERRORS_BY_KIND)
    for r in REQUESTS:
        names = {f.name for f in faults_for(r)}
        assert {"drop_once", "drop_long", "answer_lost", "delay", "unknown_server_error"} <= names
    assert ("Produce", "coordinator_not_available") in skipped()
    assert ("AddPartitionsToTxn", "request_timed_out") not in skipped()


def _my_children() -> set[int]:
    """Live child processes of this process (Linux /proc), to check none is left."""
    kids: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        kids.update(int(pid) for pid in task.read_text().split())
    return kids


@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_fault(case: Case) -> None:
    before = _my_children()
    result = await run_case(case)
    assert _my_children() <= before, "an eosflow run child was left running"
    assert result.ok, f"{case.id}: {result.outcome}"
