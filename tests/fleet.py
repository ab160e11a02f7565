"""Chaos on the eosflow side, shared by the chaos tests: a fleet of `eosflow run`
processes copying one topic into another (``tests/procs/slow_copy.py``) or counting it
(``tests/procs/slow_count.py``), which can be SIGKILLed, restarted and SIGSTOPped, and
the group's progress as committed offsets."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from eosflow._cli import EXIT_FENCED
from eosflow._ops import group_status
from eosflow.testing import check_exactly_once, spawn_run

ROOT = Path(__file__).parents[1]


def chaos_env(session_s: float) -> dict[str, str]:
    """The timings the chaos tests run instances with: heartbeats at a tenth of the
    session timeout, transactions timing out before the session does."""
    return {
        "EOSFLOW_SESSION_TIMEOUT_S": str(session_s),
        "EOSFLOW_HEARTBEAT_INTERVAL_S": str(session_s / 10),
        "EOSFLOW_TRANSACTION_TIMEOUT_S": str(session_s * 0.8),
    }


class Fleet:
    """`eosflow run` instances of one group, instance ``i`` with transactional id
    ``{run_id}-{i}`` (stable across its restarts), configured by ``env``
    (``EOSFLOW_*`` settings); odd instances with ``process_ahead`` on.

    ``restart_fenced`` makes the fleet a supervisor for one exit: an instance that exits
    fenced (exit 3) is started again. For clusters without KIP-360 only, where fencing is
    fatal by design (docs/design.md, invariant 9) and a zombie whose transaction timed out
    while it was stopped is fenced; everywhere else a fenced exit fails the test."""

    def __init__(
        self,
        bootstrap_servers: str,
        src: str,
        dst: str,
        group: str,
        run_id: str,
        env: Mapping[str, str],
        watch_servers: str | None = None,
        target: str = "slow_copy:SlowCopy",
        restart_fenced: bool = False,
        log_dir: Path | None = None,
        inputs: tuple[str, ...] = (),
    ) -> None:
        self.bootstrap_servers, self.src, self.dst, self.group = bootstrap_servers, src, dst, group
        self.inputs = inputs or (src,)  # every input topic; ``src`` is the one watched
        self.run_id, self.env = run_id, dict(env)
        # where the test reads the group's progress (a super user's listener when the
        # instances connect over a secured one)
        self.watch_servers = watch_servers or bootstrap_servers
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.target = target
        self.restart_fenced = restart_fenced
        self.log_dir = log_dir

    def log_file(self, i: int) -> Path | None:
        """Where instance ``i`` logs (at info, every run of it appended), when the fleet
        has a ``log_dir``; otherwise it writes to the test's stderr at warning."""
        return None if self.log_dir is None else self.log_dir / f"instance-{i}.log"

    def log_tail(self, i: int, lines: int = 40) -> str:
        path = self.log_file(i)
        if path is None or not path.exists():
            return ""
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        return f"\n--- {path} (last {lines} lines) ---\n" + "\n".join(tail)

    def transactional_id(self, i: int) -> str:
        return f"{self.run_id}-{i}"

    async def start(self, i: int) -> None:
        self.procs[i] = await spawn_run(
            self.target,
            bootstrap_servers=self.bootstrap_servers,
            group_id=self.group,
            input_topics=self.inputs,
            transactional_id=self.transactional_id(i),
            log_file=self.log_file(i),
            log_level="warning" if self.log_dir is None else "info",
            env={
                "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "procs")]),
                "CHAOS_OUT": self.dst,
                # both processing strategies under the same chaos, whatever the default:
                # odd instances process the next records while a commit is in flight
                # (process_ahead), even ones one transaction after the other
                "EOSFLOW_PROCESS_AHEAD": "true" if i % 2 else "false",
                **self.env,
            },
        )

    def signal(self, i: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):  # exited: what it said is checked
            self.procs[i].send_signal(sig)

    async def kill_and_restart(self, i: int, events: list[str]) -> None:
        self.signal(i, signal.SIGKILL)
        code = await self.procs[i].wait()
        assert code == -signal.SIGKILL or self.exit_allowed(code), (
            f"{i} exited {code}; {events}{self.log_tail(i)}"
        )
        await self.start(i)

    async def check_alive(self, events: list[str]) -> None:
        """Fail when an instance exited, unless it was fenced and ``restart_fenced``
        says to start it again."""
        for i, proc in self.procs.items():
            if proc.returncode is not None and self.exit_allowed(proc.returncode):
                events.append(f"{i} exited fenced: restarted")
                await self.start(i)
                continue
            assert proc.returncode is None, (
                f"instance {i} died ({proc.returncode}); {events}{self.log_tail(i)}"
            )

    def exit_allowed(self, code: int | None) -> bool:
        return self.restart_fenced and code == EXIT_FENCED

    async def stop_all(self) -> list[int | None]:
        for p in self.procs.values():
            with contextlib.suppress(ProcessLookupError):  # may have exited, not reaped
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        return [await asyncio.wait_for(p.wait(), 60) for p in self.procs.values()]


async def chaos_schedule(
    fleet: Fleet, rng: random.Random, instances: int, session_s: float, events: list[str]
) -> None:
    """SIGKILL+restart one instance, SIGSTOP another past its session timeout and wake
    it as a zombie, SIGKILL+restart one more, each after a random pause (a schedule, not
    a synchronisation: what happens in the pauses is what is tested)."""
    await asyncio.sleep(rng.uniform(1.5, 2.5))
    victim = rng.randrange(instances)
    events.append(f"SIGKILL+restart {victim}")
    await fleet.kill_and_restart(victim, events)
    await asyncio.sleep(rng.uniform(1.0, 2.0))
    zombie = rng.choice([i for i in range(instances) if i != victim])
    events.append(f"SIGSTOP {zombie} for {session_s * 1.5:.1f} s")
    fleet.signal(zombie, signal.SIGSTOP)
    await asyncio.sleep(session_s * 1.5)  # past its session timeout: it is evicted
    fleet.signal(zombie, signal.SIGCONT)
    events.append(f"SIGCONT {zombie}")
    await asyncio.sleep(rng.uniform(0.5, 1.5))
    victim = rng.randrange(instances)
    events.append(f"SIGKILL+restart {victim}")
    await fleet.kill_and_restart(victim, events)


async def run_chaos(
    fleet: Fleet,
    rng: random.Random,
    instances: int,
    session_s: float,
    partitions: int,
    records: int,
    check: Callable[[Fleet], Awaitable[None]] | None = None,
    settle: Callable[[Fleet], Awaitable[None]] | None = None,
) -> None:
    """Start ``instances`` instances, run ``chaos_schedule``, wait until the group
    committed every input (and ``settle``, while they run), stop them (each must exit
    0), and check the output exactly once (read where ``fleet.watch_servers`` says), or
    run ``check`` instead."""
    for i in range(instances):
        await fleet.start(i)
    events: list[str] = []
    try:
        await chaos_schedule(fleet, rng, instances, session_s, events)
        await until_committed(fleet, partitions, records, 180, events)
        if settle is not None:
            await settle(fleet)
    finally:
        codes = await fleet.stop_all()
    assert all(c == 0 or fleet.exit_allowed(c) for c in codes), f"exit codes {codes}; {events}"
    if check is not None:
        await check(fleet)
        return
    servers = fleet.watch_servers
    report = await check_exactly_once(servers, fleet.src, fleet.dst, group_id=fleet.group)
    assert report.ok, report.summary() + f"\nevents: {events}"
    assert report.inputs == records


async def seed(bootstrap: str, topic: str, records: int) -> None:
    """``records`` records ``k{i}``/``v{i}`` into ``topic`` (acks=all)."""
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    await p.start()
    try:
        await asyncio.gather(
            *[await p.send(topic, f"v{i}".encode(), key=f"k{i}".encode()) for i in range(records)]
        )
    finally:
        await p.stop()


async def committed_total(bootstrap: str, topic: str, partitions: int, group: str) -> int:
    """The sum of ``group``'s committed offsets over ``topic``'s partitions."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return sum([await c.committed(tp) or 0 for tp in tps])
    finally:
        await c.stop()


async def until_committed(
    fleet: Fleet, partitions: int, target: int, timeout_s: float, events: list[str]
) -> int:
    """Poll the group's committed offsets until they reach ``target`` (returns their
    sum then), failing when an instance died or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = await committed_total(fleet.watch_servers, fleet.src, partitions, fleet.group)
        if done >= target:
            return done
        if time.monotonic() >= deadline:
            tails = "".join(fleet.log_tail(i) for i in sorted(fleet.procs))
            try:  # who holds what, as the broker sees it
                group = (await group_status(fleet.watch_servers, fleet.group)).table()
            except Exception as exc:  # the diagnosis must not hide the stall
                group = f"(describing the group failed: {exc!r})"
            raise AssertionError(f"stalled at {done}/{target}; events: {events}\n{group}{tails}")
        await fleet.check_alive(events)
        await asyncio.sleep(0.5)
