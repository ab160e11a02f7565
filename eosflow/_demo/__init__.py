"""``eosflow demo``: the pipeline (``_pipeline``) and its Spark stage (``_spark``, which
needs the spark extra and is imported only by name, as an ``eosflow run`` target)."""

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

__all__ = [
    "COUNT",
    "ENRICH",
    "JOIN",
    "OUT",
    "SPARK",
    "WINDOWS",
    "CountOrders",
    "Enrich",
    "OrdersPerMinute",
    "OrdersWithCustomers",
    "cluster_settings",
    "instance_env",
    "relay",
    "run_demo",
]
