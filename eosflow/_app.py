"""``EosApp``: runs a ``Processor`` in exactly-once transactions until stopped.

The app starts, feeds and stops; the transaction cycle itself -- begin, poll, process,
send, commit, and everything about transactions and their errors -- is the engine's
(``_engine``: ``Engine`` on its ``TransactSession``). The app owns what surrounds it: the
observers (``stats`` first, then operations: health, progress, metrics, tracing), the
processor's lifecycle hooks (``configure``, ``on_start``, ``on_assigned``,
``on_revoked``, ``on_stop``), the start that a stop may cancel, and the error boundary:
nothing but eosflow's errors leaves ``run()``.

Cancellation: cancelling ``run()`` ends the open transaction explicitly (the engine's
``end_on_cancel``: aborted, or the commit in flight finished), records the outcome in
``last_outcome``, leaves the group and re-raises ``CancelledError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Protocol

from ._config import EosConfig
from ._engine import Engine, collecting
from ._errors import ConfigError, EosflowError, FatalError
from ._observe import Observer, Observers, Outcome, Stats
from ._ops import Operations, summarised_aiokafka_logs
from ._processor import Lifecycle, Processor, overrides_batch
from ._records import Partition, PartitionOffsets, StateNow
from ._stages import Pipeline, Staged, staged
from ._state import Seat, batch_ready, seated
from .sinks import PostgresSink, runner


class Runtime(Protocol):
    """What runs a processor for the app: ``Engine`` (Kafka transactions) or
    ``SinkRunner`` (a database's)."""

    @property
    def in_transaction(self) -> bool: ...
    @property
    def reader(self) -> Callable[[str, bytes], Any] | None: ...

    last_outcome: Outcome | None

    async def start(self) -> None: ...
    async def run(self) -> None: ...
    async def stop(self) -> None: ...
    def partition_offsets(self) -> dict[Partition, PartitionOffsets]: ...
    def state_now(self) -> StateNow: ...
    async def end_on_cancel(self) -> None: ...
    async def abort_on(self, exc: BaseException) -> None: ...


class EosApp:
    """Run ``processor`` under ``config``.

    ``await app.run()`` runs until ``await app.stop()``, a fatal error or cancellation.
    ``async with EosApp(...) as app:`` runs it in the background of the current event
    loop and stops it cleanly on exit (re-raising a fatal error that ended it early).
    ``observers`` are told of each transaction, rebalance and recovery (``Observer``),
    after ``stats``.
    """

    def __init__(
        self,
        processor: Processor | PostgresSink | Pipeline,
        config: EosConfig,
        observers: Sequence[Observer] = (),
    ) -> None:
        self.processor = processor
        # what runs: the processor or sink itself, or for a pipeline eosflow's processor
        # of its stages (``_stages``), with every source and repartition topic subscribed
        runs: Processor | PostgresSink
        members: tuple[object, ...] = ()
        if isinstance(processor, Pipeline):
            runs, config = staged(processor, config)
            members = (processor, *runs.members)  # Pipeline.observer and each stage's
        else:
            runs = processor
        self._runs = runs
        self.config = config
        self.stats = Stats()
        self.observers = Observers([self.stats, *observers])
        # health, progress, and metrics / tracing when configured: observers too
        self.ops = Operations(config.ops, self.observers, config.group_id, config.input_topics)
        if isinstance(runs, Staged):
            self.ops.name_stages(runs.graph.inputs(), runs.graph.repartition)  # lag per stage
        if inspect.getattr_static(processor, "observer") is not Lifecycle.observer:
            raise ConfigError(  # (an instance's own is refused by the property itself)
                f"{type(processor).__name__}.observer is eosflow's (the app's observers, "
                "Processor.observer): name your attribute otherwise"
            )
        if isinstance(runs, Processor):
            batch_ready(runs, overrides_batch(runs))
        # what the runtime gives the processor -- the observers, its stores -- is kept
        # here, not written into the user's object (``_seat``)
        self._seat = Seat(runs, self.observers, members)
        if isinstance(runs, Staged):  # each topic's partitions keep their stages' stores
            self._seat.scope = runs.scope
            self._seat.tasks = runs.tasks  # a stage's inputs and tables go together
            self._seat.aliases = runs.graph.repartition  # a stage's name for its topic
            self._seat.route = runs.route  # a stage's Regroup: an output (frameless)
        self.assigned: frozenset[tuple[str, int]] = frozenset()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._runtime: Runtime | None = None  # one per run()

    # --- public -----------------------------------------------------------------------

    async def run(self) -> None:
        try:
            with summarised_aiokafka_logs(), collecting(self.config.gc_threshold):
                with seated(self._seat):  # the processor's seam, for the whole run
                    await self._run()
        finally:  # also when the set-up before the loop failed: no port left open
            await self.ops.stop()

    def _new_runtime(self) -> Runtime:
        """The engine of Kafka transactions, or a sink's own runtime (``eosflow/sinks``):
        a sink's unit of atomicity is a database transaction."""
        hooks = (self._stopping, self._assigned, self._revoked)
        runs = self._runs
        if isinstance(runs, PostgresSink):
            sink: Runtime = runner(runs, self.config, self.observers, *hooks)
            return sink
        engine = Engine(runs, self._seat, self.config, *hooks)
        if isinstance(runs, Staged):  # a pipeline's repartition topics: made, trimmed
            engine.before_join(runs.ensure_topics)
            engine.after_commit(runs.trimmer.committed)
        return engine

    async def _run(self) -> None:
        engine = self._new_runtime()
        self._runtime = engine
        try:
            self.ops.start(engine, engine.reader)
            self._runs.configure(self.config)
            # A stop asked while starting (a slow on_start such as a Spark cold start, or
            # brokers retried for retry_timeout_s) cancels the start: nothing was consumed,
            # so nothing is committed, and the group is never joined for nothing.
            if not await self._unless_stopped(self._runs.on_start()):
                return
            if not await self._unless_stopped(engine.start()):
                return
            await engine.run()
        except asyncio.CancelledError:
            await engine.end_on_cancel()
            raise
        except BaseException as exc:
            self.ops.failed(f"{type(exc).__name__}: {exc}")
            await engine.abort_on(exc)
            if isinstance(exc, Exception) and not isinstance(exc, EosflowError):
                # the last line of the boundary: nothing but eosflow's errors leaves run()
                raise FatalError(f"unexpected {type(exc).__name__}: {exc}") from exc
            raise
        finally:
            with contextlib.suppress(Exception):
                await self._runs.on_stop()
            await engine.stop()

    async def _unless_stopped(self, step: Awaitable[None]) -> bool:
        """Run ``step`` to its end (True), or cancel it once ``stop()`` is asked (False).
        A cancellation of the app cancels the step too, which unwinds before it passes."""
        task = asyncio.ensure_future(step)
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            stopped = not task.done()
            if stopped:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if stopped:
            return False
        task.result()  # its error, if it failed
        return True

    async def stop(self) -> None:
        """Finish the transaction in progress (commit), leave the group, return when done;
        while the app is still starting, cancel the start instead."""
        self._stopping.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, FatalError):
                await self._task

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (records processed but not yet committed)."""
        return self._runtime is not None and self._runtime.in_transaction

    @property
    def last_outcome(self) -> Outcome | None:
        """How the last transaction ended (None before the first)."""
        return None if self._runtime is None else self._runtime.last_outcome

    @property
    def failure(self) -> BaseException | None:
        """The error that ended a background app (``async with``), if it has ended so."""
        task = self._task
        if task is None or not task.done() or task.cancelled():
            return None
        return task.exception()

    async def __aenter__(self) -> EosApp:
        self.ops.open()  # the metrics port is known (``ops.port``) once this returns
        self._task = asyncio.create_task(self.run(), name="eosflow-app")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping.set()
        assert self._task is not None
        await self._task  # re-raises a fatal error that ended the app

    async def _assigned(self, partitions: frozenset[tuple[str, int]]) -> None:
        self.assigned = self.assigned | partitions
        await self._runs.on_assigned(partitions)

    async def _revoked(self, partitions: frozenset[tuple[str, int]]) -> None:
        self.assigned = self.assigned - partitions
        await self._runs.on_revoked(partitions)
