"""State on the Spark path: the frames ``SparkProcessor.aggregate`` gets, and the merge
of the per-key partials it returns into eosflow's stores and windows (``BatchState``).

A store's frame is the batch's records (the input columns of ``_arrow``); a window's is
one row per record and open window, with the window's start added (``window_start``,
epoch milliseconds): a hopping window's record appears once per window, a late record in
none. The frames are built on the driver from the batch's Arrow table (a ``take`` and a
column: no per-row Python).

``aggregate`` returns one row per input partition, key (and window): ``topic``,
``partition``, ``key`` (binary or string), ``window_start`` for a window (none of them
null), and
``value`` (any type Arrow turns into Python: a number, a string, a struct as a dict),
grouped by ``STATE_KEYS`` or ``WINDOW_KEYS``. Each row is merged on the event loop:
``merge(name, old, value)``, ``old`` None for a new key. Stores are per input partition,
so the partition is part of the grouping; a key's records are in one partition anyway
when the input is keyed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from .._state import BatchState

STATE_KEYS = ("topic", "partition", "key")
"""What a store's ``aggregate`` groups by: a store is per input partition and key."""
WINDOW_KEYS = (*STATE_KEYS, "window_start")
"""What a window's ``aggregate`` groups by: per input partition, key and window."""


def frames(table: pa.Table, state: BatchState, names: list[str]) -> dict[str, pa.Table]:
    """The input of ``aggregate`` for each declared name (``table``: the batch's records,
    in the order of ``state.records``); a window's rows are its records' open windows."""
    out: dict[str, pa.Table] = {}
    for name in names:
        try:
            opened = state.windows(name)
        except KeyError:  # a store: every record
            out[name] = table
            continue
        rows = pa.array([i for i, _ in opened], pa.int64())
        starts = pa.array([s for _, s in opened], pa.int64())
        out[name] = table.take(rows).append_column("window_start", starts)
    return out


def merge_partials(
    state: BatchState,
    name: str,
    partials: pa.Table,
    window: bool,
    merge: Callable[[str, Any, Any], Any],
) -> int:
    """Merge the rows ``aggregate(name, ...)`` returned into ``name``; returns how many.
    A ``ValueError`` naming what is wrong for columns other than the expected ones, a
    null in a grouping column, or a ``window_start`` that is not an integer."""
    want = [*(WINDOW_KEYS if window else STATE_KEYS), "value"]
    got = partials.column_names
    if sorted(got) != sorted(want):
        raise ValueError(
            f"aggregate({name!r}) returned columns {got}; it must return exactly {want} "
            f"(group by eosflow.spark.{'WINDOW_KEYS' if window else 'STATE_KEYS'} and "
            "alias the aggregate as 'value')"
        )
    for c in want[:-1]:  # the grouping columns: none may be null
        if partials.column(c).null_count:
            raise ValueError(
                f"aggregate({name!r}) returned a row with a null {c!r}"
                + (
                    " (records without a key): give them one, e.g. "
                    "F.coalesce('key', F.lit(bytearray()))"
                    if c == "key"
                    else ""
                )
            )
    if window and not pa.types.is_integer(partials.column("window_start").type):
        raise ValueError(
            f"aggregate({name!r}) returned window_start as "
            f"{partials.column('window_start').type}; keep the input's (epoch milliseconds)"
        )
    cols = [partials.column(c).to_pylist() for c in want]
    starts = cols[3] if window else [None] * partials.num_rows
    values = cols[-1]

    def fold(old: Any, partial: Any) -> Any:
        return merge(name, old, partial)

    for topic, p, key, start, value in zip(cols[0], cols[1], cols[2], starts, values, strict=True):
        state.merge(name, (topic, int(p)), key, value, fold, start_ms=start)
    return int(partials.num_rows)
