"""The fault matrix in CI: every request the runtime sends, every fault class, both modes.

The full product of requests x faults x modes (``testbed._matrix``) takes longer
than CI should; ``python -m benchmarks fault-sweep`` runs it and prints every outcome.
Here runs the cover ``CI_COVER``: in each mode every request once and every fault class
at least once, and (``CI_EXTRA``) the other cases the full sweep found failing on the
runtime before issue 10's fixes, so they stay fixed. A case passes when the instance
finished all input (``committed-all``, ``recovered``) or stopped with an eosflow error
(``fatal``), and the output holds every input position below the committed offsets
exactly once and none past them.

- survive: ``EosApp`` in this process against the test cluster;
- kill: ``eosflow run`` child processes, SIGKILLed at the fault's first hit and restarted.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

import eosflow
from eosflow.testing import FakeCluster
from testbed._matrix import (
    CI_COVER,
    CI_EXTRA,
    FAULT_CLASSES,
    GROUP,
    IN,
    MODES,
    OUT,
    REQUESTS,
    Case,
    Fault,
    Request,
    Timing,
    ci_cases,
    faults_for,
    skipped,
)
from testbed._matrix_run import check_positions, classify_exit, run_case

CASES = ci_cases()


def test_the_cover_has_every_request_and_every_fault_class_in_both_modes() -> None:
    cover = CASES[: -len(CI_EXTRA)]
    assert len({c.id for c in CASES}) == len(CASES), "CI_EXTRA repeats a cover case"
    for mode in MODES:
        in_mode = [c for c in cover if c.mode == mode]
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


# --- the harness itself: a hang, a livelock and an exactly-once violation are seen ----


async def test_a_hang_is_reported_within_the_bound_not_waited_out() -> None:
    # every Fetch dropped for good: the app can do nothing, and must be reported
    never = Fault("drop_for_good", drop=True, times=None, window_s=3600)
    case = Case(Request("Fetch", "Fetch", "start", kind="data"), never, "survive")
    result = await run_case(case, Timing(case_cap_s=3))
    assert result.kind == "HANG", result.outcome
    assert result.seconds < 30


class AlwaysRetry(eosflow.Processor):
    """A batch processor whose every batch asks for a retry: each transaction aborts."""

    async def process_batch(self, records: Sequence[eosflow.Record]) -> list[eosflow.Output]:
        raise eosflow.TransactionError("try again")


async def test_aborts_climbing_without_progress_are_a_livelock() -> None:
    nudge = Fault("nudge", delay_s=0.01)
    case = Case(Request("InitProducerId", "InitProducerId", "start", kind="txn"), nudge, "survive")
    result = await run_case(case, Timing(stall_s=3), processor=AlwaysRetry())
    assert result.kind == "LIVELOCK", result.outcome
    assert result.detail.endswith("committed 0/300")


async def test_positions_find_duplicates_losses_and_outputs_past_the_commit(
    eosflow_cluster: FakeCluster,
) -> None:
    c = eosflow_cluster
    c.create_topic(IN, 2)
    c.create_topic(OUT, 2)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers)
    await p.start()
    for pos in (b"in/0/0", b"in/0/0", b"in/0/2", b"in/1/0", b"elsewhere"):
        await p.send_and_wait(OUT, pos, partition=0)
    await p.stop()
    # committed: in[0] up to 2 (offset 1's output is missing, offset 2's is past it)
    c.groups.group(GROUP).offsets[(IN, 0)] = (2, "")
    found = await check_positions(c, Timing(records=10, partitions=2))
    assert found == [
        "DUPLICATES 1",
        "LOST 1",
        "DUPLICATES 2 (outputs past the committed offsets)",
        "STRAYS 1",
    ]


def test_a_child_is_classified_by_its_exit_and_last_exception() -> None:
    leak = [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "aiokafka.errors.KafkaError: KafkaError: UnknownError()",
        "Unclosed AIOKafkaProducer",
        "producer: <aiokafka.producer.producer.AIOKafkaProducer object at 0x7f>",
    ]
    assert classify_exit(1, leak) == ("LEAK", leak[2])
    eos = [*leak[:2], "eosflow._errors.TransactionError: aborted"]
    assert classify_exit(1, eos)[0] == "fatal"
    assert classify_exit(1, ["eosflow: fatal: fenced"]) == ("fatal", "fenced")
    assert classify_exit(0, [])[0] == "EXITED"
