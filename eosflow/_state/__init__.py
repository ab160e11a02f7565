"""The state room: a processor's stores, windows, timers and tables, kept exactly once
beside the transaction. Its face is this list; the parts:

- ``_stores``: ``Stores``, what the session calls at each point of a transaction's life
  and of the group's (its docstring tells the whole cycle);
- stores and their restore: ``_store`` (``Store``, ``Serde``), ``_local`` (a partition's
  local copy), ``_layers`` (the open transaction's writes), ``_changelog`` (the records
  a changelog holds), ``_restore`` (with ``_restoring``, the mechanism it shares with
  ``_table_restore``);
- time: ``_time`` (event time, ``closed``, ``fire``), ``_windows``, ``_sessions``,
  ``_sliding``, ``_timers``;
- tables: ``_tables``, ``_global``, ``_table_restore``, ``_sync`` (records in time order
  across a stream and its tables);
- ``_batch``: ``BatchState``, what a whole-batch processor reads; ``_declare``: what a
  processor declared;
- ``_settings``: ``StateSettings``, the app's settings the room reads (never the whole
  ``EosConfig``);
- ``_seat``: ``Seat``, what the runtime gives the processor it runs (its stores, the
  record's windows and tables, the batch, the app's observers), kept off the user's
  object: ``Processor`` reads it through ``seat_of`` (``seated`` by ``EosApp.run``).
"""

from ._batch import BatchState
from ._changelog import decode_position
from ._declare import batch_ready, copartitioned, declared
from ._global import GlobalStore, GlobalTable
from ._seat import CURRENT, NOTHING, Seat, seat_of, seated
from ._sessions import Session, SessionStore
from ._settings import StateSettings, state_settings
from ._sliding import Sliding, SlidingStore
from ._store import BYTES, JSON, RESERVED_KEY, Serde, Store
from ._stores import Stores
from ._sync import Feed
from ._tables import Table, TableStore, declared_tables, subscribed
from ._time import overrides
from ._timers import Timer, TimerStore
from ._windows import Hopping, Tumbling, Window, WindowSpec, WindowStore

__all__ = [
    "BYTES",
    "CURRENT",
    "JSON",
    "NOTHING",
    "RESERVED_KEY",
    "BatchState",
    "Feed",
    "GlobalStore",
    "GlobalTable",
    "Hopping",
    "Seat",
    "Serde",
    "Session",
    "SessionStore",
    "Sliding",
    "SlidingStore",
    "StateSettings",
    "Store",
    "Stores",
    "Table",
    "TableStore",
    "Timer",
    "TimerStore",
    "Tumbling",
    "Window",
    "WindowSpec",
    "WindowStore",
    "batch_ready",
    "copartitioned",
    "declared",
    "declared_tables",
    "decode_position",
    "overrides",
    "seat_of",
    "seated",
    "state_settings",
    "subscribed",
]
