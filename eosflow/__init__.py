"""eosflow: exactly-once consume-transform-produce on Apache Kafka for asyncio.

Subclass ``Processor``, describe the instance with ``EosConfig`` and run ``EosApp``: every
input record affects the output exactly once, across crashes, rebalances and zombies.
"""

from ._app import EosApp, Stats
from ._config import EosConfig, load_config
from ._errors import (
    AuthenticationError,
    AuthorizationError,
    ConfigError,
    EosflowError,
    FatalError,
    ProcessingError,
    ProducerFencedError,
    TransactionError,
)
from ._processor import Processor
from ._records import Output, Record
from ._security import KafkaSecurity
from ._state import BYTES, JSON, Serde, Store
from ._transaction import Outcome

__all__ = [
    "BYTES",
    "JSON",
    "AuthenticationError",
    "AuthorizationError",
    "ConfigError",
    "EosApp",
    "EosConfig",
    "EosflowError",
    "FatalError",
    "KafkaSecurity",
    "Outcome",
    "Output",
    "ProcessingError",
    "Processor",
    "ProducerFencedError",
    "Record",
    "Serde",
    "Stats",
    "Store",
    "TransactionError",
    "load_config",
]
