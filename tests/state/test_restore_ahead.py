"""A restore that finds a store ahead of the group's committed offset waits for answers,
not for time: the committed offset is fetched again, and only ``transaction_timeout_s``
of answers still behind the state stop the app (``_restore``'s rule 3). Time in which
the group coordinator does not answer, or answers late, is no evidence.

Seen in a CI run's chaos on genuine 4.4.0: an instance restoring a partition found its
stores at input offset 518 and the offset fetched at 487 (a stale answer, after its own
SIGSTOP), then its membership was lost while the group coordinator was SIGSTOPped for
45 s; every refetch failed ("the membership ... was lost; retrying"), and after
``transaction_timeout_s`` the instance stopped with "its records would be applied twice".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from stateful import counts_ok, seed_keys, state_config, until_committed

import eosflow
from eosflow._protocol import _codes as codes
from eosflow.testing import FakeCluster
from eosflow.testing._faults import FaultRule
from examples.counting import Count

_AHEAD = "store 'counts' of in[0] reflects input up to offset 350, ahead"
_RETRYING = "restoring state: OffsetFetch"  # the restore's loop, on a failed refetch


class _On(logging.Handler):
    """Calls ``act`` (once) as ``eosflow.state`` logs a message starting with ``prefix``:
    in the logging call itself, so before the code under test goes on."""

    def __init__(self, prefix: str, act: Callable[[], None]) -> None:
        super().__init__(logging.DEBUG)
        self.prefix, self.act, self.done = prefix, act, False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.done and record.getMessage().startswith(self.prefix):
            self.done = True
            self.act()


# Both faults come after one refetch answered promptly (a stale answer), so the wait's
# clock has started from an answer when they begin.
#
# The refetches fail (COORDINATOR_NOT_AVAILABLE, retried within the fetch's budget of
# twice the transaction timeout, then a TransientError the restore retries) until the
# restore says it retries: ~10 s without an answer, 4.8 s allowed. Then one more stale
# answer, then the right one. Caught: a failed refetch not restarting the count (the
# app stopped: "its records would be applied twice").
#
# One refetch is answered 4 s late (an OffsetFetch held that long, as by a group
# coordinator stalled and resumed; under the fetch's 4.8 s attempt), then five more
# stale answers (0.3-0.5 s apart), then the right one: ~6 s of waiting in all, 4.8 s
# allowed, at most ~2.5 s counted from the late answer. Caught: a late answer not
# restarting the count (stopped).
@pytest.mark.parametrize("fault", ["refetches-fail", "an-answer-late"])
async def test_a_store_ahead_waits_for_answers_not_for_time(
    eosflow_cluster: FakeCluster, tmp_path: Path, fault: str
) -> None:
    c = eosflow_cluster
    src, group = "in", "g"
    c.create_topic(src, 1)
    c.create_topic(f"{src}-counts", 1)
    await seed_keys(c.bootstrap_servers, src, 300, 10)
    first = eosflow.EosApp(
        Count(), state_config(c.bootstrap_servers, group, src, "tx-1", tmp_path / "a")
    )
    async with first:
        await until_committed(c.bootstrap_servers, src, 1, group, 300, (first,))
        # what the next stable fetches answer: the second instance's assignment, its
        # first refetch, the faulty one(s), then the stale answers after them
        c.stale_offsets(group, 3 if fault == "refetches-fail" else 8)
        await seed_keys(c.bootstrap_servers, src, 50, 10, start=300)
        await until_committed(c.bootstrap_servers, src, 1, group, 350, (first,))

    # from here on only the second instance fetches offsets: the test reads the
    # cluster's, so that the fault rules meet the restore's refetches alone
    rules: list[FaultRule] = []
    fault_rule: dict[str, Any]
    if fault == "refetches-fail":
        fault_rule = {"error": codes.COORDINATOR_NOT_AVAILABLE, "times": None}
    else:
        fault_rule = {"delay_s": 4.0}

    async def fault_after_one_answer() -> None:
        await first_refetch.wait()
        rules.append(c.intercept("OffsetFetch"))  # observes the next one: the refetch
        await rules[0].matched(timeout_s=30)
        rules.append(c.intercept("OffsetFetch", **fault_rule))

    first_refetch = asyncio.Event()
    on = [_On(_AHEAD, first_refetch.set)]
    if fault == "refetches-fail":
        on.append(_On(_RETRYING, lambda: c.remove_fault(rules[1])))
    log = logging.getLogger("eosflow.state")
    level = log.level
    log.setLevel(logging.DEBUG)
    for h in on:
        log.addHandler(h)
    try:
        second = eosflow.EosApp(
            Count(), state_config(c.bootstrap_servers, group, src, "tx-2", tmp_path / "b")
        )
        async with second:
            faulting = asyncio.create_task(fault_after_one_answer())
            await seed_keys(c.bootstrap_servers, src, 50, 10, start=350)
            deadline = time.monotonic() + 60
            while sum(c.committed(group, src).values()) < 400:
                assert second.failure is None, second.failure
                assert time.monotonic() < deadline, c.committed(group, src)
                await asyncio.sleep(0.1)
            await faulting
    finally:
        for h in on:
            log.removeHandler(h)
        log.setLevel(level)
    assert all(h.done for h in on), "the fault was not met"
    assert rules[1].hits >= 1
    await counts_ok(c.bootstrap_servers, src, group)
