"""Stress: exactly once across rebalances while work is processed ahead (issue 10, item 0).

    python -m benchmarks.stress_rebalance --runs 30
    python -m benchmarks stress --runs 30            # the same

Each run starts the test cluster in this process (``FakeCluster`` on 127.0.0.1, a free
port), seeds ``--records`` keyed records on ``--partitions`` partitions, and runs
``--instances`` ``eosflow run`` instances of a pass-through processor (``process_ahead``
on; off by default since issue 22) as separate processes, started ``--stagger-s`` apart,
plus ``--joiners`` instances that keep joining and leaving: each starts, waits until it was assigned
partitions, stays up a random ``--up-s`` interval, is stopped with SIGTERM (it commits or
aborts its open transaction and leaves the group), stays down a random ``--down-s``
interval, and starts again with the same transactional id. Every join and leave is a
rebalance while the others have work in flight. ``--cpu-hogs`` busy-loop processes load
the machine during each run (started and stopped by pid).

A run ends when the group's committed offsets reach the input's end offsets (or after
``--run-timeout-s``): every instance is then stopped with SIGTERM (SIGKILL only if it has
not exited ``--stop-timeout-s`` later), and ``check_exactly_once`` reads both topics
read_committed. A run is OK with 0 duplicates, 0 lost, 0 strays and committed offsets at
the end. One line per run, then ``K of N runs failed; duplicates per failed run: [...]``;
exit status 1 if any run failed. Nothing is left running: every child is tracked by pid.

Tuning (measured on 2 cores, see ``benchmarks/README.md``): the race needs a backlog, so
that processing ahead is still running when a commit that a revocation is queued behind
finishes. 5,000 records (the default) are copied here in well under a second, before the
rebalances overlap them; ``--records 100000`` keeps the instances busy through several
rebalances. ``--delay-ms`` > 0 (a processor that sleeps) hides the race: the sleeping
loop wakes after the queued revocation has run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

from aiokafka import AIOKafkaProducer

from eosflow.testing import (
    ClusterSettings,
    FakeCluster,
    GroupSettings,
    TxnSettings,
    check_exactly_once,
    spawn_run,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
IN, OUT, GROUP = "stress-in", "stress-out", "stress"
Process = asyncio.subprocess.Process
T = TypeVar("T")


@dataclass
class RunResult:
    run: int
    seconds: float
    duplicates: int  # inputs that appear more than once in the output
    extra_outputs: int  # copies beyond the first, summed over the duplicated inputs
    lost: int
    strays: int
    offsets_behind: int  # partitions whose committed offset is short of the end
    reached_end: bool  # the committed offsets reached the end before the timeout
    rebalances: int  # generations the group went through
    joins: int  # instance starts, restarts included
    aborted: int  # "transaction aborted" lines logged by the instances
    duplicates_by_partition: dict[int, int] = field(default_factory=dict)  # input partition
    unexpected_exits: list[str] = field(default_factory=list)
    sigkilled: int = 0  # instances that ignored SIGTERM past --stop-timeout-s
    error: str | None = None  # the run could not be completed or checked
    wall_seconds: float = 0.0  # the whole run: cluster, seeding, instances, check
    ok: bool = False


class Instance:
    """One ``eosflow run`` child: its stdout/stderr drained, assignments noticed."""

    def __init__(self, name: str, txn_id: str, target: str, log_dir: Path | None) -> None:
        self.name, self.txn_id, self.target = name, txn_id, target
        self.log_file = (log_dir / f"{txn_id}.log").open("a") if log_dir else None
        self.proc: Process | None = None
        self.assigned = asyncio.Event()
        self.tail: deque[str] = deque(maxlen=20)
        self.aborted = 0
        self.starts = 0
        self.sigkilled = 0  # stops that needed SIGKILL
        self.bad_exits: list[str] = []  # non-zero exits after our SIGTERM
        self.stopping = False  # we sent SIGTERM: its exit is expected
        self._drains: list[asyncio.Task[None]] = []

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self, bootstrap: str, env: dict[str, str]) -> None:
        self.assigned.clear()
        self.starts += 1
        if self.log_file is not None:
            self.log_file.write(f"--- start {self.starts}\n")
        starting = spawn_run(
            self.target,
            bootstrap_servers=bootstrap,
            group_id=GROUP,
            input_topics=(IN,),
            transactional_id=self.txn_id,
            env=env,
            capture=True,
            log_level="info",
        )
        await despite_cancel(starting, self._adopt)

    def _adopt(self, proc: Process) -> None:
        self.proc, self.stopping = proc, False
        assert proc.stdout is not None and proc.stderr is not None
        self._drains = [
            asyncio.create_task(self._drain(proc.stdout)),
            asyncio.create_task(self._drain(proc.stderr)),
        ]

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip()
            if self.log_file is not None:
                self.log_file.write(text + "\n")
            if "eosflow.session: assigned" in text:
                self.assigned.set()
            elif "transaction aborted" in text:
                self.aborted += 1
            if ("WARNING" in text and "Heartbeat failed" not in text) or "ERROR" in text:
                self.tail.append(text)

    async def stop(self, timeout_s: float) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``."""
        proc = self.proc
        if proc is None:
            return
        self.stopping = True
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
                # -SIGTERM: stopped while starting, before its signal handlers (and before
                # it joined the group); harmless
                early = proc.returncode == -signal.SIGTERM and not self.assigned.is_set()
                if proc.returncode != 0 and not early:
                    self.bad_exits.append(f"{self.name} exited {proc.returncode} on SIGTERM")
            except TimeoutError:
                self.sigkilled += 1
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL)
                await proc.wait()
        for t in self._drains:  # the pipes close with the process
            with contextlib.suppress(Exception):
                await asyncio.wait_for(t, 5)

    def close(self) -> None:
        if self.log_file is not None:
            self.log_file.close()


async def despite_cancel(step: Awaitable[T], keep: Callable[[T], None] | None = None) -> T:
    """Finish ``step`` even if cancelled meanwhile (SIGINT or SIGTERM): starting a child
    (handed to ``keep``, so that it can be stopped by pid) or stopping them all. A
    cancellation is raised again once the step is done."""
    task = asyncio.ensure_future(step)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
    if keep is not None:
        keep(result)
    if cancelled:
        raise asyncio.CancelledError
    return result


async def start_hogs(k: int, hogs: list[Process]) -> None:
    """Start ``k`` busy loops, appending each to ``hogs`` as soon as it exists."""
    for _ in range(k):
        busy = asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
        await despite_cancel(busy, hogs.append)


async def stop_hogs(hogs: list[Process]) -> None:
    for h in hogs:
        with contextlib.suppress(ProcessLookupError):
            h.send_signal(signal.SIGTERM)
    for h in hogs:
        try:
            await asyncio.wait_for(h.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                h.send_signal(signal.SIGKILL)
            await h.wait()


async def seed(bootstrap: str, n: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futs = [
            await producer.send(
                IN, f"v-{i}".encode(), key=f"k-{i}".encode(), partition=i % partitions
            )
            for i in range(n)
        ]
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


def instance_env(args: argparse.Namespace) -> dict[str, str]:
    return {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "STRESS_OUT": OUT,
        "STRESS_DELAY_MS": str(args.delay_ms),
        "EOSFLOW_SESSION_TIMEOUT_S": "3",
        "EOSFLOW_HEARTBEAT_INTERVAL_S": "0.3",
        "EOSFLOW_TRANSACTION_TIMEOUT_S": "2.5",
        "EOSFLOW_COMMIT_INTERVAL_S": str(args.commit_interval_s),
        "EOSFLOW_MAX_RECORDS_PER_TXN": str(args.max_records_per_txn),
        "EOSFLOW_PROCESS_AHEAD": "true",  # the path this stress is about (off by default)
    }


async def _sleep_unless(done: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), seconds)


async def churn(
    inst: Instance,
    bootstrap: str,
    env: dict[str, str],
    args: argparse.Namespace,
    rng: random.Random,
    done: asyncio.Event,
) -> None:
    """Join, get partitions, stay a while, leave with SIGTERM, stay away a while; again.
    The first join comes ``--stagger-s`` after the last fixed instance started."""
    await _sleep_unless(done, args.stagger_s)
    while not done.is_set():
        await inst.start(bootstrap, env)
        assert inst.proc is not None
        waits: list[asyncio.Future[object]] = [
            asyncio.ensure_future(inst.assigned.wait()),
            asyncio.ensure_future(done.wait()),
            asyncio.ensure_future(inst.proc.wait()),
        ]
        await asyncio.wait(waits, timeout=args.run_timeout_s, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        if not inst.running:
            return  # exited on its own: the monitor reports it
        await _sleep_unless(done, rng.uniform(*args.up_s))
        if done.is_set():
            return  # the final stop takes it down
        await inst.stop(args.stop_timeout_s)
        await _sleep_unless(done, rng.uniform(*args.down_s))


async def one_run(index: int, args: argparse.Namespace, rng: random.Random) -> RunResult:
    settings = ClusterSettings(
        groups=GroupSettings(min_session_timeout_s=1.0), txns=TxnSettings(sweep_interval_s=1.0)
    )
    async with FakeCluster(settings) as cluster:  # 127.0.0.1, a free port
        boot = cluster.bootstrap_servers
        cluster.create_topic(IN, args.partitions)
        cluster.create_topic(OUT, args.partitions)
        await seed(boot, args.records, args.partitions)
        end = {
            (IN, p): log.high_watermark
            for p in range(args.partitions)
            if (log := cluster.log((IN, p))) is not None
        }
        total = sum(end.values())
        env = instance_env(args)
        logs = Path(args.logs) if args.logs else None  # created by main()
        fixed = [
            Instance(f"i{i}", f"stress-{index}-{i}", args.target, logs)
            for i in range(args.instances)
        ]
        joiners = [
            Instance(f"j{i}", f"stress-{index}-j{i}", args.target, logs)
            for i in range(args.joiners)
        ]
        done = asyncio.Event()
        unexpected: list[str] = []
        hogs: list[Process] = []
        churners: list[asyncio.Task[None]] = []
        started = time.monotonic()
        reached = False
        try:
            await start_hogs(args.cpu_hogs, hogs)
            for n, inst in enumerate(fixed):
                if n:
                    await asyncio.sleep(args.stagger_s)
                await inst.start(boot, env)
            churners = [asyncio.create_task(churn(j, boot, env, args, rng, done)) for j in joiners]
            deadline = started + args.run_timeout_s
            while time.monotonic() < deadline:
                committed = cluster.committed(GROUP, IN)
                if all(committed.get(tp, 0) >= off for tp, off in end.items()):
                    reached = True
                    break
                for inst in fixed + joiners:
                    if inst.proc is not None and inst.proc.returncode is not None:
                        if not inst.stopping:
                            unexpected.append(f"{inst.name} exited {inst.proc.returncode}")
                            inst.stopping = True  # report once
                await asyncio.sleep(0.02)
            seconds = time.monotonic() - started
        finally:
            done.set()

            async def clean_up() -> None:
                for t in churners:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(t, args.stop_timeout_s + 10)
                for inst in fixed + joiners:
                    await inst.stop(args.stop_timeout_s)
                    inst.close()
                await stop_hogs(hogs)

            await despite_cancel(clean_up())
        report = await check_exactly_once(boot, IN, OUT, match="key", group_id=GROUP)
        group = cluster.groups.get(GROUP)
        result = RunResult(
            run=index,
            seconds=round(seconds, 2),
            duplicates=len(report.duplicated),
            extra_outputs=sum(n - 1 for n in report.duplicated.values()),
            lost=len(report.lost),
            strays=len(report.strays),
            offsets_behind=len(report.offsets_behind),
            reached_end=reached,
            rebalances=group.generation if group is not None else 0,
            joins=sum(i.starts for i in fixed + joiners),
            aborted=sum(i.aborted for i in fixed + joiners),
            duplicates_by_partition=dict(
                sorted(Counter(int(k[2:]) % args.partitions for k in report.duplicated).items())
            ),
            unexpected_exits=unexpected + [e for i in fixed + joiners for e in i.bad_exits],
            sigkilled=sum(i.sigkilled for i in fixed + joiners),
        )
        result.ok = report.ok and reached and report.inputs == total
        if not result.ok or result.unexpected_exits or result.sigkilled:
            for inst in fixed + joiners:
                for line in inst.tail:
                    print(f"    {inst.name}: {line}", file=sys.stderr, flush=True)
        return result


async def main(args: argparse.Namespace, interrupted: list[str]) -> list[RunResult]:
    """Run the runs; SIGINT or SIGTERM stops after cleaning up the run in progress (its
    children stopped by pid) and names the signal in ``interrupted``."""
    task = asyncio.current_task()
    assert task is not None

    def on_signal(sig: signal.Signals) -> None:
        if not interrupted:  # once: cleaning up is bounded and must not be cut short
            task.cancel()  # aiokafka may swallow it: the flag ends the loop anyway
        interrupted.append(sig.name)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    logging.getLogger("eosflow.testing").setLevel(logging.ERROR)
    rng = random.Random(args.seed)
    results: list[RunResult] = []
    print(
        f"stress_rebalance: {args.runs} runs, {args.records} records on {args.partitions} "
        f"partitions, {args.instances} instances (+{args.joiners} joining/leaving), "
        f"{args.cpu_hogs} CPU hogs, commit interval {args.commit_interval_s} s, "
        f"max {args.max_records_per_txn} records/txn, seed {args.seed}",
        flush=True,
    )
    for i in range(1, args.runs + 1):
        if interrupted:
            break
        began = time.monotonic()
        try:
            r = await one_run(i, args, rng)
        except asyncio.CancelledError:
            if not interrupted:
                raise
            print(f"run {i}/{args.runs}: interrupted by {interrupted[0]}", flush=True)
            break
        except Exception as exc:  # a run that could not even be checked counts as failed
            r = RunResult(
                run=i,
                seconds=round(time.monotonic() - began, 2),
                duplicates=0,
                extra_outputs=0,
                lost=0,
                strays=0,
                offsets_behind=0,
                reached_end=False,
                rebalances=0,
                joins=0,
                aborted=0,
                error=repr(exc),
            )
        r.wall_seconds = round(time.monotonic() - began, 2)
        results.append(r)
        by_part = f" by input partition {r.duplicates_by_partition}" if r.duplicates else ""
        extra = f", {r.unexpected_exits}" if r.unexpected_exits else ""
        extra += f", {r.sigkilled} SIGKILLed" if r.sigkilled else ""
        extra += "" if r.reached_end else ", committed offsets did not reach the end"
        extra += f", error {r.error}" if r.error else ""
        print(
            f"run {i}/{args.runs}: {r.seconds:6.2f} s ({r.wall_seconds:.1f} s with seeding and "
            f"check), duplicates {r.duplicates} (+{r.extra_outputs} outputs){by_part}, "
            f"lost {r.lost}, strays {r.strays}, rebalances {r.rebalances}, joins {r.joins}, "
            f"aborts {r.aborted}{extra}: {'OK' if r.ok else 'FAIL'}",
            flush=True,
        )
    failed = [r for r in results if not r.ok]
    print(
        f"{len(failed)} of {len(results)} runs failed; "
        f"duplicates per failed run: {[r.duplicates for r in failed]}",
        flush=True,
    )
    return results


def write_json(path: str, args: argparse.Namespace, results: list[RunResult]) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "cores": os.cpu_count(),
                "args": vars(args),
                "runs": [asdict(r) for r in results],
            },
            indent=2,
        )
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--records", type=int, default=5000)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--instances", type=int, default=2, help="instances up for the whole run")
    p.add_argument("--joiners", type=int, default=1, help="instances that join and leave")
    p.add_argument("--stagger-s", type=float, default=0.3, help="between instance starts")
    p.add_argument("--up-s", type=float, nargs=2, default=(0.2, 0.6), metavar=("MIN", "MAX"))
    p.add_argument("--down-s", type=float, nargs=2, default=(0.0, 0.2), metavar=("MIN", "MAX"))
    p.add_argument("--cpu-hogs", type=int, default=2, help="busy-loop processes per run")
    p.add_argument("--commit-interval-s", type=float, default=0.1)
    p.add_argument("--max-records-per-txn", type=int, default=5000)
    p.add_argument("--delay-ms", type=float, default=0.0, help="processor sleep per record")
    p.add_argument("--run-timeout-s", type=float, default=120.0)
    p.add_argument("--stop-timeout-s", type=float, default=15.0)
    p.add_argument("--seed", type=int, default=20261123)
    p.add_argument(
        "--target",
        default="benchmarks._stress_proc:PassThrough",
        help="the processor (module:Class, importable with this repository on PYTHONPATH)",
    )
    p.add_argument("--logs", help="write each instance's log (level info) to DIR/<txn id>.log")
    p.add_argument(
        "--json", default=str(RESULTS / "stress_rebalance.json"), help="'' to write nothing"
    )
    return p


if __name__ == "__main__":
    arguments = _parser().parse_args()
    if arguments.logs:
        Path(arguments.logs).mkdir(parents=True, exist_ok=True)
    stopped_by: list[str] = []
    outcome = asyncio.run(main(arguments, stopped_by))
    if arguments.json:
        write_json(arguments.json, arguments, outcome)
    sys.exit(130 if stopped_by else 1 if any(not r.ok for r in outcome) else 0)
