"""``Health``: what ``/livez`` and ``/readyz`` answer, kept from the app's reports.

- **Live** unless the app has failed, or its event loop has not run for
  ``liveness_block_s`` (a processor blocking the loop: nothing commits, heartbeats stop).
  The loop's pulse is the operations ticker (``_runner``), which beats every 0.25 s; the
  HTTP server answers from its own thread, so a blocked loop gets a real 503 rather than
  a probe timeout.
- **Ready** once the instance holds partitions and has either committed a transaction
  or has nothing to do (every held partition's lag is zero: an idle input must not keep
  a rolling deploy waiting forever); unready again when no transaction committed for
  ``ready_stall_s`` while lag is above zero (a broker holding commits, a processor stuck
  in a loop, a restore that takes long). Before the first lag sample it is unready.

Trade-off: lag is sampled about once a second, so readiness lags the truth by as much.
Read from the HTTP thread, written on the loop: each answer reads a handful of
attributes, each replaced whole.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from .._config import OpsSettings
from .._observe import Observer, Outcome, TransactionReport
from .._records import Partition


class Health(Observer):
    def __init__(self, settings: OpsSettings) -> None:
        self.settings = settings
        self.pulse = time.monotonic()  # the loop's last beat
        self.failure: str | None = None
        self._held: frozenset[Partition] = frozenset()
        self._since = time.monotonic()  # of the last commit, or of the assignment
        self._committed = False
        self._lag: Mapping[Partition, int] | None = None  # None: not sampled since assigned

    def beat(self) -> None:
        self.pulse = time.monotonic()

    def failed(self, why: str) -> None:
        self.failure = why

    def transaction_ended(self, report: TransactionReport) -> None:
        if report.outcome is Outcome.COMMITTED:
            self._committed = True
            self._since = time.monotonic()

    def partitions_assigned(self, partitions: frozenset[Partition]) -> None:
        if not self._held:
            self._since = time.monotonic()
        self._held = self._held | partitions
        self._lag = None

    def partitions_revoked(self, partitions: frozenset[Partition]) -> None:
        self._held = self._held - partitions

    def lag_sampled(self, lag: Mapping[Partition, int]) -> None:
        self._lag = {tp: n for tp, n in lag.items() if tp in self._held}

    def live(self) -> tuple[bool, str]:
        if self.failure is not None:
            return False, f"the app failed: {self.failure}"
        quiet = time.monotonic() - self.pulse
        if quiet > self.settings.liveness_block_s:
            return False, f"the event loop has not run for {quiet:.1f} s"
        return True, "live"

    def ready(self) -> tuple[bool, str]:
        live, why = self.live()
        if not live:
            return False, why
        if not self._held:
            return False, "no partitions assigned"
        lag = self._lag
        if lag is None or set(lag) != self._held:
            return False, "waiting for the lag of every assigned partition"
        behind = sum(lag.values())
        if behind == 0:
            return True, "ready: caught up"
        if not self._committed:
            return False, f"nothing committed yet; lag {behind}"
        idle = time.monotonic() - self._since
        if idle > self.settings.ready_stall_s:
            return False, f"no commit for {idle:.1f} s while lag is {behind}"
        return True, f"ready: lag {behind}"
