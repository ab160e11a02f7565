"""The fault matrix: every request the runtime sends, faulted every way the test cluster
can fault it, in two modes, each case ending in one observed outcome.

A case is (request, fault, mode, arm). The request is an API the runtime sends (pinned to
one version where eosflow and aiokafka send it along different paths); the fault is one
``FaultRule`` -- dropped once, dropped for longer than any retry budget, answer lost, an
error answer, or delayed; the mode says what happens to the instance:

- ``survive``: an ``EosApp`` in this process must finish all input, or stop with an
  ``EosflowError``, never hang and never let another exception out of ``run()``;
- ``kill``: an ``eosflow run`` child process is SIGKILLed at the fault rule's first hit
  and restarted; the restarted instance must then finish, or stop with a clear error.

Either way the end state must be exactly once, checked by input position with a
read_committed reader: the output holds, per input partition, one output for every
offset below the group's committed offset and none past it (after a finished run the
committed offsets are the end offsets).

The arm says when the fault is put in place (``ARMS``):

- ``due``: when its request is due -- at start (FindCoordinator, InitProducerId, Metadata,
  Fetch, ListOffsets: the first of them is faulted), mid-stream after the first commit
  (the transaction path, heartbeats), or mid-stream with a forced rebalance (JoinGroup,
  SyncGroup, the stable OffsetFetch of the new assignment; under the consumer protocol
  the members are removed, as a session timeout would, and rejoin);
- ``start``: before the first instance starts, whatever the request (a broker restarted
  during a deploy): the first join, its positioning and the first transaction meet it;
- ``recover``: after the first commit, with a forced rebalance and one failed Produce
  right behind it, so the requests an instance sends again only when it recovers -- the
  new producer's FindCoordinator and InitProducerId, KIP-360's InitProducerId, the
  re-read of the committed offsets, the rejoin and the positioning -- meet the fault.
  The input is idle by then (every record was polled), as in issue 50's second hang.

A case passes only if its fault was hit (``hits``): a case never hit says nothing.
The input topic has one partition more than records go to (``Timing.idle_partitions``):
with nothing committed, every assignment of it asks ListOffsets where it starts.

Each request is sent under one pair of protocols: the classic group protocol with
transactions v1, or (``modern``) the consumer group protocol with transactions v2, the
defaults on Kafka 4.x; the modern requests are the ones those two add or change.

Outcomes (``Result.kind``): ``committed-all`` (finished, no transaction aborted),
``recovered`` (finished after aborts or recoveries), ``fatal`` (stopped with an eosflow
error; exactly once up to where it stopped) -- the acceptable ones -- and ``HANG``,
``LIVELOCK`` (no progress while aborts climb), ``LEAK`` (a non-eosflow exception ended
the app), ``DUPLICATES``, ``LOST``, ``NOT-HIT`` (the fault never landed) and ``HARNESS``
(the test cluster failed to answer).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from eosflow import Output, Processor, Record
from eosflow._protocol import codes

Mode = Literal["survive", "kill"]
Phase = Literal["start", "steady", "rebalance"]
Arm = Literal["due", "start", "recover"]
MODES: tuple[Mode, ...] = ("survive", "kill")
ARMS: tuple[Arm, ...] = ("due", "start", "recover")

IN, OUT, GROUP, TXN_ID = "in", "out", "g", "tx-matrix"
OK_KINDS = frozenset({"committed-all", "recovered", "fatal"})
COUNTED_KINDS = frozenset({"DUPLICATES", "LOST", "STRAYS"})  # "LOST 3", not "LOST: 3"
POSITION_COPY = "testbed._matrix:PositionCopy"  # the target of the matrix's `eosflow run`s
CHECKOUT = str(Path(__file__).resolve().parents[1])  # the folder holding testbed/


def run_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for an ``eosflow run`` child of ``POSITION_COPY``: the checkout put first
    on the child's PYTHONPATH, so that it imports ``testbed`` whatever folder it starts
    in (the editable install brings ``eosflow`` alone; ``eosflow run`` adds the current
    folder, which is the checkout only when the tests run from there)."""
    inherited = os.environ.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (CHECKOUT, inherited) if p)}


# --- the matrix ---------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """A request the runtime sends. ``version`` pins the rule to one path where the
    runtime sends the API along two (eosflow's own request and aiokafka's)."""

    name: str
    api: str
    phase: Phase
    version: int | None = None
    # which error answers Kafka can really give this request (see ``ERRORS_BY_KIND``)
    kind: Literal["txn", "group", "find", "data", "metadata"] = "group"
    note: str = ""
    # sent by an instance under the consumer group protocol and transactions v2
    modern: bool = False


REQUESTS: tuple[Request, ...] = (
    Request("Produce", "Produce", "steady", kind="data"),
    Request("AddPartitionsToTxn", "AddPartitionsToTxn", "steady", kind="txn"),
    Request("AddOffsetsToTxn", "AddOffsetsToTxn", "steady", kind="txn"),
    Request("TxnOffsetCommit", "TxnOffsetCommit", "steady", kind="txn"),
    Request("EndTxn", "EndTxn", "steady", kind="txn"),
    Request("Heartbeat", "Heartbeat", "steady", 4, note="the forced heartbeat before EndTxn"),
    Request("Heartbeat.loop", "Heartbeat", "steady", 1, note="aiokafka's heartbeat loop"),
    Request("JoinGroup", "JoinGroup", "rebalance"),
    Request("SyncGroup", "SyncGroup", "rebalance"),
    Request("OffsetFetch", "OffsetFetch", "rebalance", 9, note="the stable fetch on assignment"),
    Request("FindCoordinator", "FindCoordinator", "start", kind="find"),
    Request("InitProducerId", "InitProducerId", "start", kind="txn"),
    # at start: mid-stream the consumer has long buffered this small input, so a faulted
    # Fetch would not stand between the app and its records
    Request("Fetch", "Fetch", "start", kind="data"),
    Request("Metadata", "Metadata", "start", kind="metadata"),
    # where a partition with nothing committed starts, asked of its leader by eosflow
    Request("ListOffsets", "ListOffsets", "start", kind="data"),
    # the consumer group protocol and transactions v2 (the defaults on Kafka 4.x)
    Request("Produce.v12", "Produce", "steady", 12, "data", "adds its partition", True),
    Request("TxnOffsetCommit.v5", "TxnOffsetCommit", "steady", 5, "txn", "joins by itself", True),
    Request("EndTxn.v5", "EndTxn", "steady", 5, "txn", "answers the bumped epoch", True),
    Request("ConsumerGroupHeartbeat", "ConsumerGroupHeartbeat", "steady", 1, "group", "", True),
    Request("OffsetFetch.member", "OffsetFetch", "rebalance", 9, "group", "names the member", True),
    # what both setups send, under the modern one too
    Request("FindCoordinator.modern", "FindCoordinator", "start", None, "find", "", True),
    Request("InitProducerId.modern", "InitProducerId", "start", None, "txn", "", True),
    Request("Fetch.modern", "Fetch", "start", None, "data", "", True),
    Request("Metadata.modern", "Metadata", "start", None, "metadata", "", True),
    Request("ListOffsets.modern", "ListOffsets", "start", None, "data", "", True),
)


@dataclass(frozen=True)
class Fault:
    """One way to fault a request: the ``FaultRule`` arguments, and for a rule that
    matches every request for a while (``times=None``) how long it stays after its first
    hit."""

    name: str
    error: int | None = None
    drop: bool = False
    drop_response: bool = False
    delay_s: float = 0.0
    times: int | None = 1
    window_s: float = 0.0

    @property
    def fault_class(self) -> str:
        """The fault as the matrix counts it: an error substituted for one a request
        cannot get (NOT_LEADER_OR_FOLLOWER for NOT_COORDINATOR) counts as the latter."""
        return _SUBSTITUTES.get(self.name, self.name)


# Timing of the faults, relative to the instance's settings (``Timing``): an error is
# answered three times in a row (a single blind retry does not get past it); "long" drops
# last 6 s, past every retry budget (the adapter's coordinator retries ~2.5 s, the 2 s
# transaction timeout, the 3 s session timeout; a dropped connection fails at once, so
# aiokafka's 40 s request timeout never applies); a delay is 2 s (the transaction timeout).
ERROR_TIMES = 3
LONG_DROP_S = 6.0
DELAY_S = 2.0


def _error(name: str, code: int) -> Fault:
    return Fault(name, error=code, times=ERROR_TIMES)


NOT_COORDINATOR = _error("not_coordinator", codes.NOT_COORDINATOR)
COORDINATOR_NOT_AVAILABLE = _error("coordinator_not_available", codes.COORDINATOR_NOT_AVAILABLE)
REQUEST_TIMED_OUT = _error("request_timed_out", codes.REQUEST_TIMED_OUT)
UNKNOWN_SERVER_ERROR = _error("unknown_server_error", codes.UNKNOWN_SERVER_ERROR)
NOT_LEADER = _error("not_leader", codes.NOT_LEADER_OR_FOLLOWER)
LEADER_NOT_AVAILABLE = _error("leader_not_available", codes.LEADER_NOT_AVAILABLE)
_SUBSTITUTES = {"not_leader": "not_coordinator", "leader_not_available": "not_coordinator"}

NETWORK: tuple[Fault, ...] = (
    Fault("drop_once", drop=True),
    Fault("drop_long", drop=True, times=None, window_s=LONG_DROP_S),
    Fault("answer_lost", drop_response=True),
)
DELAY = Fault("delay", delay_s=DELAY_S)

# What Kafka can answer, per kind of request:
# - coordinator requests (group and transaction) get NOT_COORDINATOR and
#   COORDINATOR_NOT_AVAILABLE when the coordinator moved or is loading;
# - REQUEST_TIMED_OUT comes from a write that timed out replicating: Produce, and the
#   transaction coordinator's log writes (librdkafka retries it for AddPartitionsToTxn,
#   AddOffsetsToTxn and EndTxn, the Java client for TxnOffsetCommit); the group
#   membership requests and OffsetFetch never get it (the group coordinator answers
#   COORDINATOR_NOT_AVAILABLE for a timed-out write, and reads do not write);
# - FindCoordinator answers COORDINATOR_NOT_AVAILABLE, never NOT_COORDINATOR (any broker
#   can answer it) nor REQUEST_TIMED_OUT;
# - Produce and Fetch go to the partition leader, not a coordinator: NOT_LEADER_OR_FOLLOWER
#   is their "wrong broker" error; Fetch never answers REQUEST_TIMED_OUT;
# - Metadata carries errors per topic: LEADER_NOT_AVAILABLE is its "wrong broker" error;
# - UNKNOWN_SERVER_ERROR: any request, when the broker fails unexpectedly.
ERRORS_BY_KIND: dict[str, tuple[Fault, ...]] = {
    "txn": (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT, UNKNOWN_SERVER_ERROR),
    "group": (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, UNKNOWN_SERVER_ERROR),
    "find": (COORDINATOR_NOT_AVAILABLE, UNKNOWN_SERVER_ERROR),
    "data": (NOT_LEADER, UNKNOWN_SERVER_ERROR),
    "metadata": (LEADER_NOT_AVAILABLE, UNKNOWN_SERVER_ERROR),
}
_PRODUCE_ERRORS = (NOT_LEADER, REQUEST_TIMED_OUT, UNKNOWN_SERVER_ERROR)


def faults_for(request: Request) -> tuple[Fault, ...]:
    errors = _PRODUCE_ERRORS if request.api == "Produce" else ERRORS_BY_KIND[request.kind]
    return (*NETWORK, *errors, DELAY)


FAULT_CLASSES = (
    "drop_once",
    "drop_long",
    "answer_lost",
    "not_coordinator",
    "coordinator_not_available",
    "request_timed_out",
    "unknown_server_error",
    "delay",
)


def skipped() -> list[tuple[str, str]]:
    """(request, error) pairs left out of the matrix because Kafka never answers them."""
    out = []
    for r in REQUESTS:
        have = {f.fault_class for f in faults_for(r)}
        out += [(r.name, c) for c in FAULT_CLASSES if c not in have]
    return out


@dataclass(frozen=True)
class Case:
    request: Request
    fault: Fault
    mode: Mode
    arm: Arm = "due"

    @property
    def id(self) -> str:
        head = f"{self.request.name}-{self.fault.name}-{self.mode}"
        return head if self.arm == "due" else f"{head}@{self.arm}"


def arms_for(request: Request) -> tuple[Arm, ...]:
    """The arms of ``request``: ``start`` is its ``due`` one for a request due at start."""
    return tuple(a for a in ARMS if not (a == "start" and request.phase == "start"))


def all_cases(modes: Sequence[Mode] = MODES, arms: Sequence[Arm] = ARMS) -> list[Case]:
    return [
        Case(r, f, m, a)
        for a in arms
        for m in modes
        for r in REQUESTS
        if a in arms_for(r)
        for f in faults_for(r)
    ]


# The CI cover: in each mode every request once, and every fault class at least once;
# the full product is ``python -m benchmarks fault-sweep``. Includes the known failures
# (Produce UNKNOWN_SERVER_ERROR, AddPartitionsToTxn REQUEST_TIMED_OUT, group errors).
CI_COVER: dict[Mode, dict[str, str]] = {
    "survive": {
        "Produce": "unknown_server_error",
        "AddPartitionsToTxn": "request_timed_out",
        "AddOffsetsToTxn": "answer_lost",
        "TxnOffsetCommit": "not_coordinator",
        "EndTxn": "delay",
        "Heartbeat": "drop_once",
        "Heartbeat.loop": "drop_long",
        "JoinGroup": "coordinator_not_available",
        "SyncGroup": "not_coordinator",
        "OffsetFetch": "unknown_server_error",
        "FindCoordinator": "coordinator_not_available",
        "InitProducerId": "drop_once",
        "Fetch": "not_leader",
        "Metadata": "leader_not_available",
        "Produce.v12": "request_timed_out",
        "TxnOffsetCommit.v5": "coordinator_not_available",
        "EndTxn.v5": "answer_lost",
        "ConsumerGroupHeartbeat": "not_coordinator",
        "OffsetFetch.member": "drop_long",
        "ListOffsets": "drop_once",
        "FindCoordinator.modern": "unknown_server_error",
        "InitProducerId.modern": "answer_lost",
        "Fetch.modern": "unknown_server_error",
        "Metadata.modern": "delay",
        "ListOffsets.modern": "not_leader",
    },
    "kill": {
        "Produce": "drop_once",
        "AddPartitionsToTxn": "not_coordinator",
        "AddOffsetsToTxn": "request_timed_out",
        "TxnOffsetCommit": "unknown_server_error",
        "EndTxn": "answer_lost",
        "Heartbeat": "coordinator_not_available",
        "Heartbeat.loop": "delay",
        "JoinGroup": "unknown_server_error",
        "SyncGroup": "drop_once",
        "OffsetFetch": "not_coordinator",
        "FindCoordinator": "drop_long",
        "InitProducerId": "request_timed_out",
        "Fetch": "delay",
        "Metadata": "answer_lost",
        "Produce.v12": "drop_once",
        "TxnOffsetCommit.v5": "answer_lost",
        "EndTxn.v5": "not_coordinator",
        "ConsumerGroupHeartbeat": "drop_long",
        "OffsetFetch.member": "unknown_server_error",
        "ListOffsets": "delay",
        "FindCoordinator.modern": "coordinator_not_available",
        "InitProducerId.modern": "drop_long",
        "Fetch.modern": "drop_once",
        "Metadata.modern": "unknown_server_error",
        "ListOffsets.modern": "answer_lost",
    },
}


# And in CI too, so that fixing them stays fixed: the other cases that failed in the
# full sweep against the runtime of commit 87354d1 (the cover already holds Produce
# UNKNOWN_SERVER_ERROR, AddPartitionsToTxn REQUEST_TIMED_OUT, JoinGroup UNKNOWN_SERVER_ERROR,
# InitProducerId REQUEST_TIMED_OUT and FindCoordinator dropped for long).
CI_EXTRA: tuple[str, ...] = (
    "AddPartitionsToTxn-unknown_server_error-survive",
    "Heartbeat.loop-unknown_server_error-survive",
    "JoinGroup-unknown_server_error-survive",
    "SyncGroup-unknown_server_error-survive",
    "FindCoordinator-drop_once-survive",
    "InitProducerId-unknown_server_error-survive",
    "Metadata-drop_once-survive",
    "Produce-unknown_server_error-kill",
    "AddPartitionsToTxn-request_timed_out-kill",
    "Heartbeat.loop-unknown_server_error-kill",
    "SyncGroup-unknown_server_error-kill",
    "Metadata-drop_long-kill",
    # the modern rows' first sweep (2026-11-26): a heartbeat answered UNKNOWN_SERVER_ERROR
    # stopped the consumer protocol's membership (now retried until the session ends)
    "ConsumerGroupHeartbeat-unknown_server_error-survive",
    # issue 50: faults from the start and faults on a recovery's requests. OffsetFetch
    # failing at start hung the classic protocol (7 of 8 faults): positioning waited on
    # aiokafka's own refresh; a recovery whose new producer could not find its
    # coordinator was never retried once the input was idle
    "OffsetFetch-unknown_server_error-survive@start",
    "OffsetFetch-coordinator_not_available-kill@start",
    "OffsetFetch-drop_once-survive@start",
    "OffsetFetch.member-unknown_server_error-survive@start",
    "ListOffsets-drop_long-survive",
    "ListOffsets.modern-unknown_server_error-kill",
    "JoinGroup-coordinator_not_available-survive@start",
    "FindCoordinator-drop_long-survive@recover",
    "InitProducerId-unknown_server_error-survive@recover",
    "FindCoordinator.modern-drop_long-survive@recover",
    "OffsetFetch-not_coordinator-kill@recover",
    "ListOffsets-not_leader-survive@recover",
    # the first full sweep with the arms: a replacement producer that could not bootstrap
    # stopped the app (fatal), now retried; and with a poll that waits for an assignment
    # without counting as a poll, aiokafka's coordinator never rejoined (a hang)
    "Metadata-drop_long-survive@recover",
    "Metadata.modern-answer_lost-survive@recover",
)


def ci_cases() -> list[Case]:
    """The cover (``CI_COVER``), then ``CI_EXTRA``."""
    cases = []
    for mode, chosen in CI_COVER.items():
        for r in REQUESTS:
            by_name = {f.name: f for f in faults_for(r)}
            cases.append(Case(r, by_name[chosen[r.name]], mode))
    return cases + [case_by_id(i) for i in CI_EXTRA]


def case_by_id(case_id: str) -> Case:
    for c in all_cases():
        if c.id == case_id:
            return c
    raise KeyError(case_id)


# --- the instance -------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """The instance under test and the watch over it. Short timeouts keep a case within
    seconds; ``stall_s`` without progress after the fault is over is a hang."""

    records: int = 300
    partitions: int = 2  # that records go to
    idle_partitions: int = 1  # more in the input topic, never written: nothing committed
    record_cost_s: float = 0.003  # so the stream lasts about a second
    session_timeout_s: float = 3.0
    heartbeat_interval_s: float = 0.3
    transaction_timeout_s: float = 2.0
    rebalance_timeout_s: float = 6.0
    max_records_per_txn: int = 50
    hit_timeout_s: float = 20.0
    stall_s: float = 12.0
    case_cap_s: float = 120.0
    stop_timeout_s: float = 15.0
    livelock_aborts: int = 3

    def settings(self, modern: bool = False) -> dict[str, str]:
        """The instance's settings; the protocols pinned, the classic group protocol with
        transactions v1 or (``modern``) the consumer protocol with transactions v2. Under
        the consumer protocol the heartbeat and session are the test cluster's."""
        return {
            "group_protocol": "consumer" if modern else "classic",
            "transactions_v2": "on" if modern else "off",
            "session_timeout_s": str(self.session_timeout_s),
            "heartbeat_interval_s": str(self.heartbeat_interval_s),
            "transaction_timeout_s": str(self.transaction_timeout_s),
            "rebalance_timeout_s": str(self.rebalance_timeout_s),
            "max_records_per_txn": str(self.max_records_per_txn),
        }


class PositionCopy(Processor):
    """Writes each input record's position (``topic/partition/offset``) under its key, so
    the check can tell, per input offset, whether its output is there exactly once.
    ``eosflow run testbed._matrix:PositionCopy`` (``POSITION_COPY``; its child's
    environment from ``run_env``) reads MATRIX_OUT and MATRIX_RECORD_COST_S from the
    environment."""

    def __init__(self, out: str | None = None, cost_s: float | None = None) -> None:
        self.out = out if out is not None else os.environ.get("MATRIX_OUT", OUT)
        self.cost_s = (
            cost_s if cost_s is not None else float(os.environ.get("MATRIX_RECORD_COST_S", "0"))
        )

    async def process(self, record: Record) -> Output:
        if self.cost_s:
            await asyncio.sleep(self.cost_s)
        position = f"{record.topic}/{record.partition}/{record.offset}".encode()
        return Output(self.out, position, key=record.key)


@dataclass
class Result:
    case_id: str
    kind: str
    detail: str = ""
    seconds: float = 0.0
    hits: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.kind in OK_KINDS and not self.notes

    @property
    def outcome(self) -> str:
        """The one-line outcome: ``committed-all``, ``fatal: <message>``, ``HANG: ...``."""
        sep = " " if self.kind in COUNTED_KINDS else ": "
        head = self.kind if not self.detail else f"{self.kind}{sep}{self.detail}"
        return " + ".join([head, *self.notes])

    def line(self) -> str:
        return f"{self.case_id:<52} {self.outcome}  [{self.seconds:.1f} s, {self.hits} hits]"
