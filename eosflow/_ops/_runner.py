"""``Operations``: the operations observers of one app, built from ``OpsSettings``, and
their loop side.

Built with the app: health and progress always (progress unless its interval is 0),
Prometheus metrics and the HTTP port when ``metrics_port`` is set, tracing when asked
and OpenTelemetry is installed; each joins the app's observers. ``start`` (first thing
in ``run()``) opens the port and starts the ticker, a task on the app's event loop that

- beats every 0.25 s: the pulse ``/livez`` watches;
- samples the held partitions' offsets about once a second (``Watched``: the session's
  view, no broker request, no await: the pulse never waits on it), tells every observer
  their lag (``lag_sampled``) and the console where each stands, what restores and
  what each store's local copy holds;
- logs the progress line when due.

``failed`` marks the app failed (``/livez`` answers 503 from then on); ``stop`` (last
thing in ``run()``) ends the ticker and closes the port. A ticker error is logged and
the ticker goes on: watching the app never stops it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from .._config import OpsSettings
from .._console import Console
from .._observe import Observers
from .._records import Partition, PartitionOffsets, StateNow
from ._health import Health
from ._http import MetricsServer
from ._metrics import PrometheusMetrics, require_prometheus
from ._progress import Progress, stages_of
from ._query import Read, StateQueries
from ._tracing import Tracing

log = logging.getLogger("eosflow.ops")


class Watched(Protocol):
    """What the ticker samples of the running app (the engine, or a sink's runner)."""

    def partition_offsets(self) -> Mapping[Partition, PartitionOffsets]: ...
    def state_now(self) -> StateNow: ...


BEAT_S = 0.25
LAG_EVERY_S = 1.0


class Operations:
    def __init__(
        self,
        settings: OpsSettings,
        observers: Observers,
        group: str = "",
        inputs: Iterable[str] = (),
    ) -> None:
        self.settings = settings
        self.observers = observers
        self.health = Health(settings)
        self.progress = (
            Progress(settings.progress_interval_s) if settings.progress_interval_s else None
        )
        self.metrics: PrometheusMetrics | None = None
        if settings.metrics_port is not None:
            require_prometheus()  # the install hint at construction, not at the first scrape
            self.metrics = PrometheusMetrics()
        self.tracing = Tracing() if settings.tracing and Tracing.available() else None
        self.console: Console | None = None  # with a port: the page at /
        if settings.metrics_port is not None and settings.console:
            self.console = Console(group, inputs)
        recorder = self.console.recorder if self.console is not None else None
        for member in (self.health, self.metrics, self.progress, self.tracing, recorder):
            if member is not None:
                observers.add(member)
        self._server: MetricsServer | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.queries = StateQueries()  # GET /state/<store>/<key>, once started

    def name_stages(
        self, readers: Mapping[str, Iterable[str]], regroups: Mapping[str, str] | None = None
    ) -> None:
        """A pipeline's stages (in the graph's order) and the topics each reads: the
        progress line and ``eosflow_stage_lag`` give each stage's lag; the console draws
        the graph (``regroups``: a stage read by others -> its repartition topic)."""
        stages = stages_of(readers)
        for member in (self.progress, self.metrics):
            if member is not None:
                member.stages = stages
        if self.console is not None:
            self.console.name_stages(readers, regroups)

    @property
    def port(self) -> int | None:
        """The metrics port in use (a free one when ``metrics_port`` is 0), once started."""
        return self._server.port if self._server is not None else None

    def open(self) -> None:
        """Listen on the metrics port, if one is set (``port`` tells which); idempotent.
        A port that cannot be bound is a ``ConfigError``."""
        cfg = self.settings
        if cfg.metrics_port is not None and self._server is None:
            registry = self.metrics.registry if self.metrics is not None else None
            pages = self.console.routes() if self.console is not None else None
            self._server = MetricsServer(
                cfg.metrics_host, cfg.metrics_port, self.health, registry, self.queries, pages
            )
            self._server.start()

    def start(self, watched: Watched, read: Read | None = None) -> None:
        """``open``, then start the ticker on the running loop; ``read`` answers state
        queries (``Stores.read_committed``) from then on."""
        self.open()
        if read is not None:
            self.queries.serve(read, asyncio.get_running_loop())
        self.health.beat()
        self._ticker = asyncio.create_task(self._tick(watched), name="eosflow-ops")

    def failed(self, why: str) -> None:
        self.health.failed(why)

    async def stop(self) -> None:
        self.queries.stop()
        if self._ticker is not None:
            ticker, self._ticker = self._ticker, None
            ticker.cancel()
            await asyncio.wait([ticker])  # (a cancellation of the caller is not swallowed)
        if self.progress is not None:
            self.progress.emit(time.monotonic())  # the last partial interval
        if self._server is not None:
            server, self._server = self._server, None
            await asyncio.to_thread(server.stop)

    async def _tick(self, watched: Watched) -> None:
        sampled = 0.0
        while True:
            await asyncio.sleep(BEAT_S)
            now = time.monotonic()
            self.health.beat()
            try:
                if now - sampled >= LAG_EVERY_S:
                    sampled = now
                    sample = watched.partition_offsets()
                    self.observers.lag_sampled({p: o.lag for p, o in sample.items()})
                    if self.console is not None:  # where each partition stands, for its page
                        self.console.recorder.offsets_sampled(sample)
                        self._sample_state(watched)
                if self.progress is not None and self.progress.due(now):
                    self.progress.emit(now)
            except Exception:
                log.exception("operations ticker failed; going on")

    def _sample_state(self, watched: Watched) -> None:
        """The console's sample of the state (restores, the local copies' sizes): a
        failure is logged and leaves the rest of the tick (lag, progress) to run."""
        assert self.console is not None
        try:
            self.console.recorder.state_sampled(watched.state_now())
        except Exception:
            log.exception("sampling the state for the console failed; going on")
