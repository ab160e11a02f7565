"""The benchmark comparison's rules: one transaction budget reaches every contender, each
in the form its library takes, and the broker's ceiling is read from the perf producer's
steady-state line (benchmarks/_budget.py, _harness.py, _jvm.py, _ceiling.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks import _harness as harness
from benchmarks import compare
from benchmarks._budget import Budget, TxnRule, eosflow_settings, quix_settings
from benchmarks._ceiling import WARMUP_SHARE, steady_rate
from benchmarks._jvm import JavaContender
from eosflow import EosConfig

# what kafka-producer-perf-test 4.4.0 printed here for 40,000 records, a quarter warm-up
PERF_OUTPUT = """\
Option --producer-props has been deprecated and will be removed in a future version. Use \
--command-property instead.
Warmup first 10000 records. Steady state results will print after the complete test summary.
40000 records sent, 55710.306407 records/sec (5.31 MB/sec), 65.70 ms avg latency, 165.00 ms \
max latency, 73 ms 50th, 123 ms 95th, 128 ms 99th, 129 ms 99.9th.
30000 steady state records sent, 80000.000000 records/sec (7.63 MB/sec), 61.75 ms avg \
latency, 133.00 ms max latency, 31 ms 50th, 125 ms 95th, 128 ms 99th, 129 ms 99.9th.
"""


def options(*argv: str) -> argparse.Namespace:
    """The comparison's options as its command line would give them."""
    args = argparse.Namespace(txn_records=None, txn_bytes=None, min_txn_s=None, budget_of=None)
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        if flag == "--budget-of":
            args.budget_of = [*(args.budget_of or []), compare._named_count(value)]
        else:
            setattr(args, flag.lstrip("-").replace("-", "_"), float(value))
    return args


class Echo(JavaContender):
    """A Java contender whose command is its arguments (no jars, no javac)."""

    def __init__(self) -> None:
        super().__init__("echo", "echo", lambda v: [], "Echo", "0")

    def command(self, *args: str) -> list[str]:
        return list(args)


def handed(name: str, budget: Budget) -> list[str]:
    """The command line ``compare`` builds for one run of ``name``."""
    args = argparse.Namespace(work_rounds=0, streams=Echo(), copier=Echo())
    args.jvm_warm, args.streams_set = ("w-in", "w-out", 10), None
    return harness.command(name, "b:1", ("in", "out"), 1000, "g", budget, args, Path("/s"))


def test_every_contender_gets_eosflows_default_budget_unless_a_flag_names_it() -> None:
    defaults = Budget(interval_s=0.1, records=20_000, bytes=2 * 1024 * 1024, min_txn_s=0.02)
    assert Budget.defaults() == defaults
    assert {n: harness.budget_of(n, options(), 0.1) for n in harness.CONTENDERS} == dict.fromkeys(
        harness.CONTENDERS, defaults
    )
    every = {
        harness.budget_of(n, options("--txn-records", "5000"), 1.0) for n in harness.CONTENDERS
    }
    assert every == {defaults.but(records=5000, interval_s=1.0)}
    one = options("--budget-of", "librdkafka=1000")
    assert harness.budget_of("librdkafka", one, 0.1) == defaults.but(records=1000)
    assert {harness.budget_of(n, one, 0.1) for n in harness.CONTENDERS if n != "librdkafka"} == {
        defaults
    }
    assert harness.budget_of("eosflow", options("--txn-bytes", "0"), 0.1).bytes is None
    assert harness.budget_of("aiokafka", options("--min-txn-s", "0.005"), 0.1).min_txn_s == 0.005


@pytest.mark.parametrize("name", harness.PYTHON)
def test_a_python_contender_is_handed_the_whole_budget(name: str) -> None:
    budget = Budget(interval_s=0.25, records=1234, bytes=5678, min_txn_s=0.03)
    cmd = handed(name, budget)
    assert cmd[cmd.index("benchmarks._contenders") + 1] == name
    assert Budget.from_argv(cmd[-4:]) == budget
    assert Budget.from_argv(budget.but(bytes=None).argv()).bytes is None


def test_kafka_streams_is_handed_the_whole_budget() -> None:
    budget = Budget(interval_s=0.25, records=1234, bytes=5678, min_txn_s=0.03)
    cmd = handed("kafka-streams", budget)
    # PassThrough: ... STATE_DIR INTERVAL_MS TXN_RECORDS TXN_BYTES MIN_TXN_MS WARM_SRC ...
    assert cmd[cmd.index("/s") + 1 :][:4] == ["250", "1234", "5678", "30"]
    assert cmd[-3:] == ["w-in", "w-out", "10"]


def test_kafka_copier_is_handed_the_record_cap() -> None:
    cmd = handed("kafka-copier", Budget(interval_s=0.25, records=1234, bytes=None, min_txn_s=0))
    # CopierRun BOOTSTRAP SRC DST RECORDS GROUP TXN_RECORDS WARM_SRC WARM_DST WARM_RECORDS
    assert cmd == ["b:1", "in", "out", "1000", "g", "1234", "w-in", "w-out", "10"]


def test_eosflow_and_quixstreams_take_the_budget_in_their_own_settings() -> None:
    budget = Budget(interval_s=0.25, records=1234, bytes=5678, min_txn_s=0.03)
    config = EosConfig(
        bootstrap_servers="b:1",
        group_id="g",
        input_topics=("in",),
        transactional_id="t",
        **eosflow_settings(budget),
    )
    assert (config.commit_interval_s, config.max_records_per_txn) == (0.25, 1234)
    assert (config.max_bytes_per_txn, config.min_transaction_s) == (5678, 0.03)
    assert quix_settings(budget) == {"commit_interval": 0.25, "commit_every": 1234}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_loops_end_a_transaction_by_eosflows_rules() -> None:
    clock = Clock()
    rule = TxnRule(Budget(interval_s=0.1, records=1000, bytes=50_000, min_txn_s=0.02), clock)
    assert rule.room() == 1000  # no bytes per record measured yet
    rule.begin()
    assert rule.wait_s() == pytest.approx(0.02)  # wait for input only until min_txn_s
    rule.took(100, 10_000)  # 100 B a record
    assert not rule.full()
    assert rule.room() == 400  # the byte cap, at the measured size, before the record cap
    clock.now += 0.05
    assert rule.wait_s() == 0  # past min_txn_s: a poll that finds nothing ends it
    rule.took(400, 40_000)
    assert rule.full()  # the byte cap
    rule.end()
    rule.begin()
    rule.took(10, 100)
    assert not rule.full()
    clock.now += 0.099
    assert not rule.full()
    clock.now += 0.002
    assert rule.full()  # the interval
    rule.end()
    rule.begin()
    rule.took(1000, 10)
    assert rule.full()  # the record cap


def test_the_ceiling_is_the_perf_producers_steady_state_line() -> None:
    assert steady_rate(PERF_OUTPUT, 40_000 - 40_000 // WARMUP_SHARE) == 80_000.0
    with pytest.raises(RuntimeError, match="no steady-state line"):
        steady_rate(PERF_OUTPUT.rsplit("\n", 2)[0], 30_000)  # the whole-run line only
