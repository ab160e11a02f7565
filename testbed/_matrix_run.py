"""Running the fault matrix's cases (``_matrix``): the instance in this process or as
``eosflow run`` children, the fault armed when its request is due, the watch for
progress, hangs and livelocks, and the exactly-once check by input position."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import Counter
from collections.abc import Callable

from aiokafka import AIOKafkaProducer

from eosflow import EosApp, EosConfig, EosflowError, Processor
from eosflow._protocol import codes
from eosflow._timeouts import within
from eosflow.testing import FakeCluster, FaultRule, read_topic, spawn_run
from eosflow.testing._ladder import fake_settings
from eosflow.testing._txn import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY

from ._matrix import (
    GROUP,
    IN,
    OK_KINDS,
    OUT,
    POSITION_COPY,
    TXN_ID,
    Case,
    PositionCopy,
    Result,
    Timing,
    run_env,
)


class _Runner:
    """One instance: in this process (survive) or as ``eosflow run`` children (kill)."""

    async def start(self) -> None:
        raise NotImplementedError

    def ended(self) -> bool:
        raise NotImplementedError

    def ending(self) -> tuple[str, str]:
        """(kind, detail) of an instance that ended on its own."""
        raise NotImplementedError

    async def stop(self, timeout_s: float) -> tuple[str, str] | None:
        """Stop gracefully; None if it stopped cleanly, else (kind, detail)."""
        raise NotImplementedError

    async def abandon(self, timeout_s: float) -> str:
        """Stop it by force (after a hang); returns a note if even that failed."""
        raise NotImplementedError

    async def kill_and_restart(self) -> None:
        raise NotImplementedError

    def client_aborts(self) -> int:
        """Aborts and recoveries the instance counted itself (those of empty
        transactions never reach the broker); 0 where it cannot be asked."""
        return 0


class _InProcess(_Runner):
    def __init__(
        self, c: FakeCluster, t: Timing, processor: Processor | None, modern: bool
    ) -> None:
        settings: dict[str, object] = dict(t.settings(modern))
        config = EosConfig(
            bootstrap_servers=c.bootstrap_servers,
            group_id=GROUP,
            input_topics=(IN,),
            transactional_id=TXN_ID,
            **settings,  # type: ignore[arg-type]
        )
        self.app = EosApp(processor or PositionCopy(OUT, t.record_cost_s), config)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.app.run(), name="matrix-app")

    def ended(self) -> bool:
        return self.task is not None and self.task.done()

    def ending(self) -> tuple[str, str]:
        assert self.task is not None and self.task.done()
        if self.task.cancelled():
            return "LEAK", "CancelledError: run() was cancelled"
        exc = self.task.exception()
        if exc is None:
            return "EXITED", "run() returned without being stopped"
        return classify_exception(exc)

    async def stop(self, timeout_s: float) -> tuple[str, str] | None:
        assert self.task is not None
        await self.app.stop()  # sets the stop flag (the task is ours, not the app's)
        await asyncio.wait({self.task}, timeout=timeout_s)
        if not self.task.done():
            return "HANG", f"run() did not return within {timeout_s:.0f} s of stop()"
        if self.task.cancelled() or self.task.exception() is not None:
            return self.ending()
        return None

    async def abandon(self, timeout_s: float) -> str:
        assert self.task is not None
        self.task.cancel()
        await asyncio.wait({self.task}, timeout=timeout_s)
        if not self.task.done():
            return f"; run() ignored cancellation for {timeout_s:.0f} s"
        return ""

    async def kill_and_restart(self) -> None:
        raise RuntimeError("an in-process instance cannot be SIGKILLed")

    def client_aborts(self) -> int:
        return self.app.stats.aborted + self.app.stats.recovered


class _Children(_Runner):
    """``eosflow run`` child processes, one at a time, stopped by pid."""

    def __init__(self, c: FakeCluster, t: Timing, modern: bool) -> None:
        self.c = c
        self.env = {f"EOSFLOW_{k.upper()}": v for k, v in t.settings(modern).items()}
        self.env.update(MATRIX_OUT=OUT, MATRIX_RECORD_COST_S=str(t.record_cost_s))
        self.env = run_env(self.env)  # the child imports testbed from this checkout
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr: list[str] = []
        self._drains: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.stderr = []
        self.proc = await spawn_run(
            POSITION_COPY,
            bootstrap_servers=self.c.bootstrap_servers,
            group_id=GROUP,
            input_topics=(IN,),
            transactional_id=TXN_ID,
            env=self.env,
            capture=True,
            log_level="error",
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._drains = [
            asyncio.create_task(_drain(self.proc.stdout, None)),
            asyncio.create_task(_drain(self.proc.stderr, self.stderr)),
        ]

    def ended(self) -> bool:
        return self.proc is not None and self.proc.returncode is not None

    def ending(self) -> tuple[str, str]:
        assert self.proc is not None
        return classify_exit(self.proc.returncode, self.stderr)

    async def _reap(self, timeout_s: float) -> bool:
        assert self.proc is not None
        try:
            await within(self.proc.wait(), timeout_s)
        except TimeoutError:
            return False
        await asyncio.wait(self._drains, timeout=5)
        return True

    async def stop(self, timeout_s: float) -> tuple[str, str] | None:
        assert self.proc is not None
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        if not await self._reap(timeout_s):
            await self.abandon(5)
            return "HANG", f"did not exit within {timeout_s:.0f} s of SIGTERM"
        if self.proc.returncode == 0:
            return None
        return self.ending()

    async def abandon(self, timeout_s: float) -> str:
        assert self.proc is not None
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await self._reap(timeout_s)
        return ""

    async def kill_and_restart(self) -> None:
        await self.abandon(10)
        await self.start()


async def _drain(stream: asyncio.StreamReader, into: list[str] | None) -> None:
    while line := await stream.readline():
        if into is not None:
            into.append(line.decode(errors="replace").rstrip())
            del into[:-400]


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """How an exception out of ``run()`` counts: an eosflow error is a clear stop, any
    other is a leak. Named as a traceback names it (module-qualified unless builtin)."""
    cls = type(exc)
    name = (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
    if isinstance(exc, EosflowError):
        return "fatal", _one_line(f"{cls.__qualname__}: {exc}")
    return "LEAK", _one_line(f"{name}: {exc}")


def classify_exit(code: int | None, stderr: list[str]) -> tuple[str, str]:
    """What an ``eosflow run`` exit status and its stderr say about how it ended."""
    lines = [ln for ln in stderr if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith("eosflow: fatal: ")]
    if code == 1 and fatal:
        return "fatal", _one_line(fatal[-1].removeprefix("eosflow: fatal: "))
    if code == 0:
        return "EXITED", "exit status 0 before being stopped"
    if code is not None and code < 0:
        return "LEAK", f"killed by signal {-code}"
    tracebacks = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent")]
    if tracebacks:
        # the exception is the first unindented line after the last traceback's frames
        # (aiokafka may log "Unclosed AIOKafkaProducer" after it)
        after = lines[tracebacks[-1] + 1 :]
        last = next((ln for ln in after if not ln[:1].isspace()), "?")
        if last.split(":", 1)[0].startswith("eosflow."):
            return "fatal", _one_line(last)
        return "LEAK", _one_line(last)
    return "LEAK", f"exit status {code}: " + _one_line(lines[-1] if lines else "(no output)")


def _one_line(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --- one case -----------------------------------------------------------------------


class _ClusterErrors(logging.Handler):
    """The test cluster failing to answer (e.g. an error body that does not encode)
    shows as an unhandled exception in its connection callback: a harness failure."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "client_connected_cb" in record.getMessage():
            exc = record.exc_info[1] if record.exc_info else None
            self.seen.append(_one_line(repr(exc)))


async def run_case(
    case: Case, timing: Timing | None = None, processor: Processor | None = None
) -> Result:
    """Run one case on a fresh test cluster and say how it ended. ``processor`` replaces
    ``PositionCopy`` in survive mode (to test the harness itself)."""
    t = timing or Timing()
    started = time.monotonic()
    errors = _ClusterErrors()
    logging.getLogger("asyncio").addHandler(errors)
    try:
        async with FakeCluster(fake_settings()) as c:
            result = await _run(case, c, t, processor)
    finally:
        logging.getLogger("asyncio").removeHandler(errors)
    if errors.seen:  # the case says nothing about the runtime then
        result.notes.insert(0, result.outcome)
        result.kind, result.detail = "HARNESS", f"the cluster failed to answer: {errors.seen[0]}"
    result.seconds = time.monotonic() - started
    return result


async def _seed(c: FakeCluster, t: Timing) -> None:
    c.create_topic(IN, t.partitions + t.idle_partitions)
    c.create_topic(OUT, 2)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, linger_ms=5)
    await p.start()
    try:
        futs = [
            await p.send(IN, b"x", key=f"k{i}".encode(), partition=i % t.partitions)
            for i in range(t.records)
        ]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


def _arm(c: FakeCluster, case: Case) -> FaultRule:
    f = case.fault
    return c.intercept(
        case.request.api,
        error=f.error,
        drop=f.drop,
        drop_response=f.drop_response,
        delay_s=f.delay_s,
        times=f.times,
        version=case.request.version,
    )


def _progress(c: FakeCluster) -> int:
    return sum(c.committed(GROUP, IN).values())


async def _run(case: Case, c: FakeCluster, t: Timing, processor: Processor | None) -> Result:
    await _seed(c, t)
    runner: _Runner
    modern = case.request.modern
    runner = (
        _InProcess(c, t, processor, modern) if case.mode == "survive" else _Children(c, t, modern)
    )
    phase = case.request.phase if case.arm == "due" else case.arm
    rule = _arm(c, case) if phase == "start" else None
    provoke: FaultRule | None = None
    await runner.start()
    try:
        if rule is None:
            ok = await _wait(lambda: _progress(c) > 0 or runner.ended(), t.hit_timeout_s)
            if runner.ended():
                kind, detail = runner.ending()
                return Result(
                    case.id, "NOT-HIT", f"ended before the fault was armed: {kind}: {detail}"
                )
            if not ok:
                return Result(case.id, "HANG", "nothing committed before the fault was armed")
            rule = _arm(c, case)
            if phase in ("rebalance", "recover"):
                c.force_rebalance(GROUP)
            if phase == "recover":  # the producer is replaced (KIP-360), positions re-read
                provoke = c.intercept("Produce", error=codes.UNKNOWN_SERVER_ERROR, times=1)
        await _wait(lambda: rule.hits > 0 or runner.ended(), t.hit_timeout_s)
        if rule.hits == 0:
            c.faults.clear()
            if runner.ended():
                kind, detail = runner.ending()
                return Result(
                    case.id, "NOT-HIT", f"ended before the fault landed: {kind}: {detail}"
                )
            why = f"no matching request within {t.hit_timeout_s:.0f} s"
            return await _finish(case, c, t, runner, rule, "NOT-HIT", why)
        hit_at = time.monotonic()
        if case.mode == "kill":
            await runner.kill_and_restart()
        over_at = hit_at + max(case.fault.window_s, case.fault.delay_s)
        if case.fault.window_s:
            asyncio.get_running_loop().call_at(
                asyncio.get_running_loop().time() + case.fault.window_s, c.remove_fault, rule
            )
        kind, detail = await _watch(c, t, runner, over_at, started=hit_at)
        provoked = provoke is None or provoke.hits > 0
        result = await _finish(case, c, t, runner, rule, kind, detail)
        if not provoked:  # then no recovery was asked for: the case says nothing of one
            result.notes.append("NOT-PROVOKED: the failed Produce never landed")
        return result
    finally:
        c.faults.clear()
        await runner.abandon(10)


async def _wait(cond: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``cond()`` every 20 ms until it holds or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def _watch(
    c: FakeCluster, t: Timing, runner: _Runner, over_at: float, started: float
) -> tuple[str, str]:
    """Watch until all input is committed, the instance ends, or it stalls."""

    def aborts() -> int:  # seen by the broker or by the app, whichever saw more
        return max(c.txns.aborts, runner.client_aborts())

    last, last_at, aborts_at = _progress(c), time.monotonic(), aborts()
    while True:
        now = time.monotonic()
        done = _progress(c)
        if done != last:
            last, last_at, aborts_at = done, now, aborts()
        if done >= t.records:
            return "done", ""
        if runner.ended():
            return runner.ending()
        quiet = now - max(last_at, over_at)
        if quiet > t.stall_s or now - started > t.case_cap_s:
            aborts_seen = aborts() - aborts_at
            where = f"committed {done}/{t.records}"
            if aborts_seen >= t.livelock_aborts:
                return "LIVELOCK", f"{aborts_seen} aborts in {now - last_at:.0f} s, {where}"
            return "HANG", f"no progress for {now - last_at:.0f} s, {where}"
        await asyncio.sleep(0.05)


async def _finish(
    case: Case,
    c: FakeCluster,
    t: Timing,
    runner: _Runner,
    rule: FaultRule,
    kind: str,
    detail: str,
) -> Result:
    c.faults.clear()
    notes: list[str] = []
    if kind == "done":
        stopped = await runner.stop(t.stop_timeout_s)
        if stopped is None:
            # a KIP-360 re-initialisation is a recovery even when no transaction was
            # open on the broker to abort
            recoveries = c.txns.aborts + c.txns.reinits + runner.client_aborts()
            kind = "recovered" if recoveries else "committed-all"
        else:
            kind, detail = stopped
            detail = f"on stop: {detail}"
    elif kind not in OK_KINDS or not runner.ended():
        note = await runner.abandon(10)
        detail += note
    await _settle(c, t)
    notes += await check_positions(c, t)
    result = Result(case.id, kind, detail, hits=rule.hits, notes=notes)
    if notes and kind in OK_KINDS:  # the end state decides: a violation is the outcome
        violation, _, count = notes[0].partition(" ")
        result = Result(case.id, violation, count, hits=rule.hits, notes=notes[1:])
        result.notes.append(Result(case.id, kind, detail).outcome)
    return result


async def _settle(c: FakeCluster, t: Timing) -> None:
    """Wait until no transaction is open or half-ended (a killed instance's open one ends
    at its timeout) and the group holds no staged offsets, so outputs and committed
    offsets are final."""
    group = c.groups.get(GROUP)

    def settled() -> bool:
        ended = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
        if any(m.state not in ended for m in c.txns.txns.values()):
            return False
        return group is None or not group.pending_txn

    await _wait(settled, t.transaction_timeout_s * 3 + 2)


async def check_positions(c: FakeCluster, t: Timing) -> list[str]:
    """Exactly once by input position: per input partition, one output for each offset
    below the committed offset and none past it. Returns the violations (empty if none):
    ``DUPLICATES n`` (also for outputs past the committed offsets: a restart produces them
    again), ``LOST n`` (committed offsets without their output), ``STRAYS n``."""
    committed = c.committed(GROUP, IN)
    outputs = await read_topic(c.bootstrap_servers, OUT, timeout_s=30)
    seen = Counter(v for _p, _o, _k, v in outputs)
    expected: set[bytes] = set()
    for p in range(t.partitions):
        upto = committed.get((IN, p), 0)
        expected.update(f"{IN}/{p}/{o}".encode() for o in range(upto))
    dups = sum(n - 1 for n in seen.values() if n > 1)
    lost = sum(1 for pos in expected if pos not in seen)
    past = sum(1 for pos in seen if pos not in expected and _is_input(pos, t))
    strays = sum(1 for pos in seen if not _is_input(pos, t))
    out = []
    if dups:
        out.append(f"DUPLICATES {dups}")
    if lost:
        out.append(f"LOST {lost}")
    if past:
        out.append(f"DUPLICATES {past} (outputs past the committed offsets)")
    if strays:
        out.append(f"STRAYS {strays}")
    return out


def _is_input(pos: bytes | None, t: Timing) -> bool:
    if pos is None:
        return False
    parts = pos.decode(errors="replace").split("/")
    return (
        len(parts) == 3
        and parts[0] == IN
        and parts[1].isdigit()
        and int(parts[1]) < t.partitions
        and parts[2].isdigit()
        and int(parts[2]) < t.records
    )
