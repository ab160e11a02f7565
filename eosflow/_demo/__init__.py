"""``eosflow demo``: the pipeline (``_pipeline``) and its Spark stage (``_spark``, which
needs the spark extra and is imported only by name, as an ``eosflow run`` target) and
its PostgreSQL sink (``_sink``: ``OrdersIntoPostgres``, the table and its check)."""

from ._pipeline import (
    COUNT,
    ENRICH,
    JOIN,
    OUT,
    SPARK,
    WINDOWS,
    CountOrders,
    Enrich,
    OrdersPerMinute,
    OrdersWithCustomers,
    cluster_settings,
    instance_env,
    relay,
    run_demo,
)
from ._sink import OrdersIntoPostgres

__all__ = [
    "COUNT",
    "ENRICH",
    "JOIN",
    "OUT",
    "SPARK",
    "WINDOWS",
    "CountOrders",
    "Enrich",
    "OrdersIntoPostgres",
    "OrdersPerMinute",
    "OrdersWithCustomers",
    "cluster_settings",
    "instance_env",
    "relay",
    "run_demo",
]
