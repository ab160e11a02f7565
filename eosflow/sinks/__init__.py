"""Sinks: processors whose output is written outside Kafka, exactly once.

``PostgresSink`` writes each batch of input records into PostgreSQL in one database
transaction with the batch's input positions (the offsets table), so the rows and the
positions commit together or not at all; a claim per partition fences an instance that
lost it. The room:

- ``_postgres``: ``PostgresSink``, what a user subclasses (``write``);
- ``_offsets``: the offsets table and all of its SQL (claim, check, advance, read back);
- ``_tables``: ``TableWrite``, the declarative write (``into``, ``upsert``);
- ``_runner``: ``SinkRunner``, the group consumer and the write cycle, with its outcomes;
- ``_connection``: ``Database``, the one connection, its settings, made again when lost;
- ``_retries``: ``Retries``, the failure clock and the backoff;
- ``_errors``: asyncpg's exceptions mapped into eosflow's tree, in one place.

asyncpg is needed only to run a sink (``pip install 'eosflow[postgres]'``): importing
this package does not import it.
"""

from __future__ import annotations

from typing import Any

from .._errors import ConfigError
from .._state import copartitioned, declared
from ._postgres import PostgresSink

__all__ = ["PostgresSink", "runner", "stateless"]


def runner(sink: PostgresSink, *args: Any) -> Any:
    """The runtime of ``sink`` for ``EosApp`` (``SinkRunner``; ``args`` as its own),
    or a ``ConfigError`` naming the install when asyncpg is missing, or naming the
    state a sink declares but would never keep (``stateless``)."""
    stateless(sink)
    try:
        from ._runner import SinkRunner
    except ImportError as exc:
        raise ConfigError(
            f"{type(sink).__name__} needs asyncpg ({exc}): pip install 'eosflow[postgres]'"
        ) from None
    return SinkRunner(sink, *args)


def stateless(sink: PostgresSink) -> None:
    """A one-line ``ConfigError`` when ``sink`` declares stores, windows, timers, tables
    or co-partitioned inputs: the sink runner keeps none of them (its rows and positions
    are the database's), so they would be silently unused."""
    name = type(sink).__name__
    stores = sorted(declared(sink))  # stores, windows and timers, by store name
    kept = ["stores " + ", ".join(stores)] if stores else []
    tables = getattr(sink, "tables", None)
    if tables:
        kept.append("tables " + ", ".join(sorted(tables)))
    if copartitioned(sink):
        kept.append("copartitioned = True")
    if kept:
        raise ConfigError(
            f"{name} is a PostgresSink and declares state ({'; '.join(kept)}), which a sink "
            "never keeps: its rows and positions are the database's. Drop it, or keep the "
            "state in a Processor whose output topic the sink reads"
        )
