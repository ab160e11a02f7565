"""``EosConfig``: every setting of an eosflow app, from code or ``EOSFLOW_*`` variables.

Durations are seconds (``*_s``). The defaults follow franz-go's GroupTransactSession and
Kafka Streams under exactly-once: 45 s session, 40 s transaction timeout (kept below the
session timeout, so a hung commit expires before the member can be expelled), 100 ms
commit interval, stable offset fetches on, 200 ms post-commit delay where they are not
available.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ._errors import ConfigError
from ._security import KafkaSecurity, OneLineSettings, settings_lines

ENV_PREFIX = "EOSFLOW_"

#: The ``EOSFLOW_*`` variables that are not ``EosConfig`` fields (the one list of them):
#: read by other parts of eosflow and its tooling, so ``EosConfig`` lets them through.
#: Any other ``EOSFLOW_*`` variable is an error naming the closest field. Entries ending
#: in ``_`` are namespaces owned by the component named.
OTHER_ENV_VARS: Mapping[str, str] = {
    "EOSFLOW_SPARK_": "eosflow.spark.SparkSettings (master, remote, conf, job_timeout_s, ...)",
    "EOSFLOW_TEST_": "the test broker ladder (EOSFLOW_TEST_BOOTSTRAP, EOSFLOW_TEST_KAFKA_IMAGE, "
    "EOSFLOW_TEST_BROKER, EOSFLOW_TEST_KAFKA_CACHE) and the Spark tests' mode "
    "(EOSFLOW_TEST_SPARK)",
    "EOSFLOW_BENCH_": "the benchmarks (EOSFLOW_BENCH_BOOTSTRAP)",
    "EOSFLOW_POSTGRES_": "eosflow.PostgresSink's database (EOSFLOW_POSTGRES_DSN) and the test "
    "kit's PostgreSQL binaries (EOSFLOW_POSTGRES_BIN)",
    "EOSFLOW_EXTRAS": "scripts/_venv.sh: the extras to install",
    "EOSFLOW_APP_": "the processor's own settings (eosflow.AppSettings; eosflow run --set)",
    "EOSFLOW_SCHEMA_REGISTRY_": "eosflow.SchemaRegistrySettings (url, username, password, "
    "ssl_cafile, auto_register, ...)",
}

APP_PREFIX = ENV_PREFIX + "APP_"


class OpsSettings(OneLineSettings):
    """How a running app shows itself (``EosConfig.ops``): metrics, health probes,
    progress and tracing of one instance. Read from ``EOSFLOW_*`` variables and ``eosflow
    run`` flags like the other settings. Defaults: no HTTP port (nothing listens unless
    asked), a progress line every 10 s, tracing on wherever OpenTelemetry is installed
    (its API without an SDK costs next to nothing). Used by ``_ops``."""

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
    console: bool = Field(
        default=True,
        description="serve the console, a page showing the app live, at / on the metrics "
        "port (when one is set)",
    )


class EosConfig(OneLineSettings):
    """Settings of one eosflow instance (frozen; validated on construction: a bad value
    or an unknown name is a ``ConfigError`` of one line naming the field)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")
    what: ClassVar[str] = "eosflow config"

    bootstrap_servers: str = Field(min_length=1, description="host:port[,host:port...]")
    group_id: str = Field(min_length=1, description="consumer group shared by all instances")
    input_topics: Annotated[tuple[str, ...], NoDecode] = Field(
        min_length=1, description="topics to consume, comma-separated"
    )
    transactional_id: str = Field(
        min_length=1,
        description="stable per instance: a restarted instance must reuse its id, so the "
        "broker aborts its predecessor's open transaction at once",
    )
    group_instance_id: str | None = Field(
        default=None,
        description="static membership (KIP-345): restarts within the session timeout "
        "(the broker's group.consumer.session.timeout.ms under the consumer protocol) do "
        "not move partitions",
    )
    client_id: str = Field(
        default="eosflow",
        description="client id sent to the brokers; the group member's adds the "
        "transactional id and its start in microseconds, each after a dash",
    )
    security: KafkaSecurity = Field(
        default_factory=KafkaSecurity,
        description="TLS and SASL of every connection (its own EOSFLOW_* settings)",
    )
    ops: OpsSettings = Field(
        default_factory=OpsSettings,
        description="metrics, health probes, progress and tracing (their own EOSFLOW_* settings)",
    )

    session_timeout_s: float = Field(
        default=45.0, gt=0, description="group session timeout, seconds"
    )
    heartbeat_interval_s: float = Field(
        default=3.0, gt=0, description="background heartbeat period, seconds"
    )
    rebalance_timeout_s: float = Field(
        default=60.0, gt=0, description="time members get to rejoin a rebalance, seconds"
    )
    transaction_timeout_s: float = Field(
        default=40.0,
        gt=0,
        le=900,
        description="broker-side transaction timeout, seconds; must be below "
        "session_timeout_s (a hung commit then expires before the group can move "
        "partitions) unless allow_transaction_timeout_over_session",
    )
    allow_transaction_timeout_over_session: bool = Field(
        default=False, description="opt out of the transaction < session timeout rule"
    )

    commit_interval_s: float = Field(
        default=0.1,
        gt=0,
        description="a transaction spans at most this long from its first record, seconds; "
        "must be below transaction_timeout_s",
    )
    min_transaction_s: float = Field(
        default=0.02,
        ge=0,
        description="a transaction whose input has caught up (nothing buffered) commits "
        "once it is this old, rather than waiting for commit_interval_s; it bounds the "
        "commit rate of a slow input (at most commit_interval_s); seconds (process() "
        "only: process_batch transactions fill to the interval)",
    )
    max_records_per_txn: int = Field(
        default=20_000,
        gt=0,
        description="a transaction holds at most this many records (each costs ~0.8 KiB of "
        "memory while held, whatever its size); where the app works ahead (process_ahead) "
        "and this is not set, twice the default: 40,000",
    )
    max_bytes_per_txn: int | None = Field(
        default=2 * 1024 * 1024,
        gt=0,
        description="and at most about this many key+value bytes (none: no byte cap); with "
        "max_records_per_txn it keeps memory flat at any rate and record size; where the "
        "app works ahead and this is not set, twice the default: 4 MiB",
    )
    gc_threshold: int | None = Field(
        default=20_000,
        gt=0,
        description="Python's first-generation garbage-collection threshold while the app "
        "runs (the interpreter's default is 700; restored when the app stops): every record "
        "allocates a few objects, and collecting every 700 cost ~20% of a pass-through's "
        "CPU; none: leave the collector alone",
    )
    process_ahead: bool | None = Field(
        default=None,
        description="process the next records while the previous transaction commits; "
        "their outputs are held back and sent only once it committed, or dropped and "
        "redone if it did not (processing runs more than once then, as after any abort); "
        "none (the default): on where the app keeps state (stores, windows, timers or "
        "tables, a pipeline's stages' included), off for a stateless one; measured on "
        "genuine Kafka, it made a count, a window, a join and a regroup 10-14% faster "
        "and a stateless copy no faster, with 5-12 MiB more memory; an app working ahead "
        "also gets twice the default transaction caps it leaves unset, which costs up to "
        "~20 MiB more, and 1 MB producer batches (max_batch_bytes; benchmarks/README.md)",
    )
    group_protocol: Literal["auto", "classic", "consumer"] = Field(
        default="auto",
        description="the group protocol: 'classic' (JoinGroup/SyncGroup, every partition "
        "revoked at each rebalance), 'consumer' (KIP-848, Kafka 4.0+: server-side "
        "assignment, only the partitions that move are revoked; heartbeat and session "
        "are the broker's group.consumer.* settings), or 'auto': 'consumer' where the "
        "cluster has it, else 'classic'",
    )
    transactions_v2: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="transactions v2 (KIP-890 part 2, Kafka 4.0+ with transaction.version "
        ">= 2): every commit bumps the producer epoch, so the broker refuses a zombie's "
        "late writes, and partitions and offsets join the transaction with their first "
        "write (no AddPartitionsToTxn/AddOffsetsToTxn); 'auto' uses it where the cluster "
        "has it, 'on' requires it",
    )
    require_stable_fetch_offsets: bool = Field(
        default=True, description="fetch committed offsets with RequireStable (KIP-447)"
    )
    post_commit_delay_s: float = Field(
        default=0.2,
        ge=0,
        description="where stable offset fetches are unavailable or off: how long a "
        "commit holds back rebalances, seconds",
    )
    auto_offset_reset: Literal["earliest", "latest"] = Field(
        default="earliest", description="where a partition without a committed offset starts"
    )

    dead_letter_topic: str | None = Field(
        default=None,
        description="if set, a record whose processing raises goes here (with "
        "error headers) inside the same transaction, and "
        "processing continues; if unset the app stops",
    )
    retry_backoff_s: float = Field(
        default=0.01,
        gt=0,
        description="first backoff after a failure, seconds (aiokafka's fixed retry backoff "
        "too; its 100 ms default dominates latency); eosflow's own retries and failed "
        "transactions double it up to retry_backoff_max_s",
    )
    retry_backoff_max_s: float = Field(
        default=1.0, gt=0, description="cap of the growing backoff between retries"
    )
    retry_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="how long broker or network failures may go on without a committed "
        "transaction before the app stops with the last cause (as Kafka Streams' "
        "task.timeout.ms)",
    )
    state_dir: str = Field(
        default="eosflow-state",
        min_length=1,
        description="where stores keep their local copies (a directory per group and "
        "transactional id beneath it); a cache of the changelog, safe to delete",
    )
    state_cache_bytes: int = Field(
        default=64 << 20,
        ge=0,
        description="memory for the values stores read and wrote lately, kept in front "
        "of RocksDB for the whole app (0: none), in two generations of half of it; a "
        "table or windows that do not fit read RocksDB for what fell out, about 1 us a "
        "read (the default keeps about 145,000 values of 100 B in its newer generation)",
    )
    changelog_replication_factor: int = Field(
        default=-1,
        ge=-1,
        description="replication factor of the changelog topics eosflow creates "
        "(-1: the broker's default.replication.factor)",
    )
    linger_s: float = Field(
        default=0.0, ge=0, description="producer linger before sending a batch, seconds"
    )
    max_batch_bytes: int = Field(
        default=256 * 1024,
        gt=0,
        description="producer batch size limit, bytes; where the app works ahead "
        "(process_ahead) and this is not set, 1,000,000: its next transaction is processed "
        "while the last, larger batch is acknowledged (measured: a join 14% faster; a "
        "copy, which does not work ahead, 18% slower with them)",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # called on every construction, before the environment is read
        check_environment(os.environ, cls)
        return init_settings, env_settings, dotenv_settings, file_secret_settings

    @field_validator("input_topics", mode="before")
    @classmethod
    def _split_topics(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(t.strip() for t in value.split(",") if t.strip())
        return value

    @field_validator("transactions_v2", mode="before")
    @classmethod
    def _on_off(cls, value: object) -> object:
        """A boolean, or a word for one, is 'on' or 'off'."""
        words = {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, str):
            word = value.strip().lower()
            return words.get(word, word)
        return value

    @field_validator("gc_threshold", "max_bytes_per_txn", mode="before")
    @classmethod
    def _none_word(cls, value: object) -> object:
        """``none`` (from the environment or a flag) is None: no byte cap, the collector
        left alone."""
        if isinstance(value, str) and value.strip().lower() == "none":
            return None
        return value

    @model_validator(mode="after")
    def _check_timeouts(self) -> EosConfig:
        if (
            self.transaction_timeout_s >= self.session_timeout_s
            and not self.allow_transaction_timeout_over_session
        ):
            raise ValueError(
                f"transaction_timeout_s ({self.transaction_timeout_s}) must be below "
                f"session_timeout_s ({self.session_timeout_s}) so that a hung commit "
                "expires before the group can move its partitions; set "
                "allow_transaction_timeout_over_session=true to opt out"
            )
        if self.commit_interval_s >= self.transaction_timeout_s:
            raise ValueError(
                f"commit_interval_s ({self.commit_interval_s}) must be below "
                f"transaction_timeout_s ({self.transaction_timeout_s}): the broker would "
                "abort every transaction that spans the interval"
            )
        if self.heartbeat_interval_s >= self.session_timeout_s:
            raise ValueError("heartbeat_interval_s must be below session_timeout_s")
        if self.changelog_replication_factor == 0:
            raise ValueError(
                "changelog_replication_factor must be at least 1, or -1 for the broker's default"
            )
        return self


NESTED: Mapping[str, type[BaseSettings]] = {"security": KafkaSecurity, "ops": OpsSettings}
"""The fields of ``EosConfig`` that are settings objects of their own, whose fields are
read from ``EOSFLOW_<FIELD>`` and given as flags like the rest."""


def load_config(**values: object) -> EosConfig:
    """Build an ``EosConfig`` from ``values`` over the environment, raising
    ``ConfigError`` with one line per invalid field."""
    try:
        for name, model in NESTED.items():
            given = values.get(name)
            if isinstance(given, Mapping):  # flags given: over the environment's settings
                values = {**values, name: model(**given)}
        return EosConfig(**values)  # type: ignore[arg-type]
    except ValidationError as exc:  # a nested model's, if any
        raise ConfigError("invalid eosflow config: " + settings_lines(exc, EosConfig)) from None


def load_security(values: object = None) -> KafkaSecurity:
    """``KafkaSecurity`` from ``values`` (a mapping, or None) over the environment, for
    the tools that need only the connection settings (``eosflow check``)."""
    try:
        return KafkaSecurity(**(dict(values) if isinstance(values, Mapping) else {}))
    except ValidationError as exc:
        lines = settings_lines(exc, KafkaSecurity)
        raise ConfigError("invalid eosflow security settings: " + lines) from None


def check_environment(environ: Mapping[str, str], cls: type[BaseSettings] = EosConfig) -> None:
    """Raise ``ConfigError`` for an ``EOSFLOW_*`` variable that is neither a field of
    ``cls`` nor in ``OTHER_ENV_VARS``, naming the closest field (a misspelt setting
    would otherwise be ignored silently)."""
    fields = [*cls.model_fields, *(f for m in NESTED.values() for f in m.model_fields)]
    known = [ENV_PREFIX + name.upper() for name in fields if name not in NESTED]
    for var in sorted(environ):
        upper = var.upper()  # pydantic-settings reads the environment case-insensitively
        if not upper.startswith(ENV_PREFIX) or upper in known or _is_other(upper):
            continue
        close = difflib.get_close_matches(upper, known, n=1)
        hint = f"did you mean {close[0]}?" if close else "see eosflow run --help for the settings"
        raise ConfigError(f"unknown setting {var}; {hint}")


def _is_other(var: str) -> bool:
    return any(
        var.startswith(name) if name.endswith("_") else var == name for name in OTHER_ENV_VARS
    )


_BUILT: set[type[BaseSettings]] = set()  # the AppSettings classes built in this process


class AppSettings(OneLineSettings):
    """A processor's own settings -- an output topic's name, a threshold, a window's size
    -- as a pydantic model read from ``EOSFLOW_APP_<FIELD>`` variables and ``eosflow run
    --set field=value`` flags (a flag wins), with eosflow's one-line errors: a bad value
    or an unknown name is a ``ConfigError`` naming the field. Subclass it with fields and
    defaults, and build it in the processor's ``__init__`` (``eosflow run`` builds the
    processor without arguments)::

        class Clicks(eosflow.Processor):
            class Settings(eosflow.AppSettings):
                output: str = "clicks-5m"
                window_s: float = 300

            def __init__(self, settings: Settings | None = None) -> None:
                self.settings = settings or self.Settings()
                self.windows = {"clicks": eosflow.Tumbling(size_s=self.settings.window_s)}

    Values are read as pydantic-settings reads the environment: text, or JSON for a list
    or a mapping. ``eosflow run`` refuses a ``--set`` name or an ``EOSFLOW_APP_``
    variable that no settings class the processor built has, naming the closest field.
    Frozen: settings do not change while the app runs."""

    model_config = SettingsConfigDict(env_prefix=APP_PREFIX, frozen=True, extra="forbid")
    what: ClassVar[str] = "app settings"

    def __init__(self, **values: object) -> None:
        super().__init__(**values)
        _BUILT.add(type(self))


def app_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """``--set name=value`` flags as ``EOSFLOW_APP_<NAME>`` variables, put into this
    process's environment (where ``AppSettings`` reads them); a flag without ``=`` is a
    ``ConfigError``. Returns them, name -> value, for ``check_app_settings``."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set {pair!r}: expected name=value")
        out[name.strip()] = value
    for name, value in out.items():
        os.environ[APP_PREFIX + name.upper()] = value
    return out


def check_app_settings(flags: Iterable[str], environ: Mapping[str, str]) -> None:
    """After the processor is built: a ``ConfigError`` for a ``--set`` name (``flags``) or
    an ``EOSFLOW_APP_*`` variable that no ``AppSettings`` class built so far has -- a
    misspelt setting would otherwise be ignored -- naming the closest field."""
    fields = sorted({f for cls in _BUILT for f in cls.model_fields})
    given = [(f"--set {name}", name.lower()) for name in flags]
    given += [(var, var[len(APP_PREFIX) :].lower()) for var in sorted(environ)
              if var.upper().startswith(APP_PREFIX)]  # fmt: skip
    for said, name in given:
        if name in fields:
            continue
        if not fields:
            raise ConfigError(f"{said}: the processor builds no eosflow.AppSettings")
        close = difflib.get_close_matches(name, fields, n=1)
        hint = f"did you mean {close[0]}?" if close else f"its settings: {', '.join(fields)}"
        raise ConfigError(f"{said}: no such app setting; {hint}")
