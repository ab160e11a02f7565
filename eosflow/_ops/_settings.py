"""``OpsSettings``: how a running app shows itself (``EosConfig.ops``).

Read from ``EOSFLOW_*`` variables and ``eosflow run`` flags like the other settings.
Defaults: no HTTP port (nothing listens unless asked), a progress line every 10 s,
tracing on wherever OpenTelemetry is installed (its API without an SDK costs next to
nothing).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OpsSettings(BaseSettings):
    """Metrics, health probes, progress and tracing of one instance."""

    model_config = SettingsConfigDict(env_prefix="EOSFLOW_", frozen=True, extra="forbid")

    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="serve /metrics (Prometheus), /livez and /readyz on this port (0: a "
        "free one, logged); needs the metrics extra",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="address the metrics port listens on (0.0.0.0: every interface)",
    )
    progress_interval_s: float = Field(
        default=10.0,
        ge=0,
        description="log a progress line this often (rate, lag, commits, aborts by "
        "reason), seconds; 0: never",
    )
    ready_stall_s: float = Field(
        default=60.0,
        gt=0,
        description="/readyz fails when no transaction committed for this long while lag "
        "is above zero, seconds",
    )
    liveness_block_s: float = Field(
        default=10.0,
        gt=0,
        description="/livez fails when the event loop has not run for this long, seconds",
    )
    tracing: bool = Field(
        default=True,
        description="one OpenTelemetry span per transaction, phases and Spark jobs as "
        "children, when opentelemetry-api is installed (the otel extra)",
    )
