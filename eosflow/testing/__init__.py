"""eosflow's wire-level Kafka test cluster, fixtures and exactly-once checker.

``FakeCluster`` speaks the Kafka protocol on 127.0.0.1 so that aiokafka and eosflow's own
protocol code run unchanged against it; tests inject faults with ``intercept`` and drive
groups with ``force_rebalance``/``expire_member``. It is a test double, never a production
path: the broker-contract tests hold it against genuine Kafka. ``SchemaRegistry`` runs a
genuine schema registry (Apicurio Registry, its Confluent-compatible API) beside it.
"""

from .._checks import (
    CheckReport,
    StateReport,
    WindowReport,
    check_counts,
    check_exactly_once,
    check_state,
    check_windows,
    expected_join,
    expected_windows,
    join_of,
    read_topic,
)
from ._broker import PROFILES, ClusterSettings
from ._cluster import FakeCluster
from ._faults import FaultRule
from ._groups import GroupSettings
from ._procs import spawn_run
from ._registry import RegistryTls, SchemaRegistry
from ._sasl import ClusterSecurity
from ._txn import TxnSettings

__all__ = [
    "PROFILES",
    "CheckReport",
    "ClusterSecurity",
    "ClusterSettings",
    "FakeCluster",
    "FaultRule",
    "GroupSettings",
    "RegistryTls",
    "SchemaRegistry",
    "StateReport",
    "TxnSettings",
    "WindowReport",
    "check_counts",
    "check_exactly_once",
    "check_state",
    "check_windows",
    "expected_join",
    "expected_windows",
    "join_of",
    "read_topic",
    "spawn_run",
]
