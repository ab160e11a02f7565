"""eosflow: exactly-once consume-transform-produce on Apache Kafka for asyncio.

Subclass ``Processor``, describe the instance with ``EosConfig`` and run ``EosApp``: every
input record affects the output exactly once, across crashes, rebalances and zombies.
"""

from ._app import EosApp
from ._config import AppSettings, EosConfig, OpsSettings, load_config
from ._errors import (
    AuthenticationError,
    AuthorizationError,
    ConfigError,
    DecodeError,
    EosflowError,
    FatalError,
    IncompatibleSchemaError,
    ProcessingError,
    ProducerFencedError,
    SchemaRegistryError,
    TransactionError,
)
from ._observe import AbortReason, Observer, Outcome, SparkJobReport, Stats, TransactionReport
from ._ops import PrometheusMetrics
from ._processor import Processor
from ._records import Output, Record
from ._schemas import Avro, JsonSchema, Protobuf, SchemaRegistrySettings
from ._security import KafkaSecurity
from ._stages import Pipeline, Regroup, Stage
from ._state import (
    BYTES,
    JSON,
    BatchState,
    GlobalStore,
    GlobalTable,
    Hopping,
    Serde,
    Session,
    SessionStore,
    Sliding,
    SlidingStore,
    Store,
    Table,
    TableStore,
    Timer,
    TimerStore,
    Tumbling,
    Window,
    WindowStore,
)
from ._typed import Model, Topic
from ._version import __version__
from .sinks import PostgresSink

__all__ = [
    "BYTES",
    "JSON",
    "AbortReason",
    "AppSettings",
    "AuthenticationError",
    "AuthorizationError",
    "Avro",
    "BatchState",
    "ConfigError",
    "DecodeError",
    "EosApp",
    "EosConfig",
    "EosflowError",
    "FatalError",
    "GlobalStore",
    "GlobalTable",
    "Hopping",
    "IncompatibleSchemaError",
    "JsonSchema",
    "KafkaSecurity",
    "Model",
    "Observer",
    "OpsSettings",
    "Outcome",
    "Output",
    "Pipeline",
    "PostgresSink",
    "ProcessingError",
    "Processor",
    "ProducerFencedError",
    "PrometheusMetrics",
    "Protobuf",
    "Record",
    "Regroup",
    "SchemaRegistryError",
    "SchemaRegistrySettings",
    "Serde",
    "Session",
    "SessionStore",
    "Sliding",
    "SlidingStore",
    "SparkJobReport",
    "Stage",
    "Stats",
    "Store",
    "Table",
    "TableStore",
    "Timer",
    "TimerStore",
    "Topic",
    "TransactionError",
    "TransactionReport",
    "Tumbling",
    "Window",
    "WindowStore",
    "__version__",
    "load_config",
]
