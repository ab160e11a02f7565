"""Operating a running app: Prometheus metrics, health probes, lag, the progress log,
tracing and ``eosflow status``. Every part is an ``Observer`` of the app or reads the
broker on its own; nothing here is on the per-record path.

Its settings are ``OpsSettings`` (``EosConfig.ops``), kept with the others in
``_config``. The parts:

- ``_metrics``: ``PrometheusMetrics``, the observer that keeps the metrics;
- ``_health``: ``Health``, what ``/livez`` and ``/readyz`` answer;
- ``_http``: the HTTP server (a thread) serving the three;
- ``_progress``: ``Progress``, the periodic log line;
- ``_tracing``: ``Tracing``, OpenTelemetry spans from transaction reports;
- ``_runner``: ``Operations``, which builds the above from the settings and runs the
  loop-side ticker (loop liveness, lag samples, progress lines);
- ``_status``: ``eosflow status``, a group's partitions from the broker's view;
- ``_group_console``: ``eosflow console``, the same view as a live page in the browser
  (the console room's ``GroupPage``);
- ``_topic_io``: ``eosflow produce`` and ``eosflow consume``, lines into a topic and a
  topic's committed records out (for trying eosflow and looking at what it wrote);
- ``_loading``: ``load_processor``, the ``package.module:ClassName`` that ``eosflow run``
  builds, and ``load_plan``, the pipeline's checked graph for ``eosflow topology`` and
  ``eosflow status``.
"""

from ._group_console import console_command
from ._loading import load_plan, load_processor
from ._logs import JsonLines, summarised_aiokafka_logs
from ._logs import configure as configure_logs
from ._metrics import PrometheusMetrics
from ._runner import Operations
from ._status import group_status
from ._topic_io import consume_command, produce_command

__all__ = [
    "JsonLines",
    "Operations",
    "PrometheusMetrics",
    "configure_logs",
    "console_command",
    "consume_command",
    "group_status",
    "load_plan",
    "load_processor",
    "produce_command",
    "summarised_aiokafka_logs",
]
