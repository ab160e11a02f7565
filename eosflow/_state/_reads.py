"""``Reads``: what a processor reads of its state while a record is processed -- the
record's stores, windows, timers and tables -- and what a query reads of the committed
copies (``read_committed``), the console their sizes (``sizes``). ``Stores`` is one;
its lifecycle and the transaction's steps are in ``__init__``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._errors import TransactionError
from .._records import Partition, StoreSize
from ._global import GlobalStore, GlobalTables, bound_serde
from ._store import Serde, Store
from ._tables import Table, TableStore

if TYPE_CHECKING:
    from ._layers import Layers
    from ._local import LocalPartition
    from ._sessions import SessionStore
    from ._sizes import Sizes
    from ._sliding import SlidingStore
    from ._time import EventTime
    from ._timers import TimerStore
    from ._windows import WindowStore

# a sibling partition revoked while records that read it were in hand (a rebalance)
_GONE = "is no longer held here: the transaction is aborted and its records redone"


class Reads:
    """The reading side of ``Stores`` (which sets every attribute below)."""

    specs: dict[str, Serde]
    tables: dict[str, Table]
    globals: GlobalTables
    current: Partition | None  # the partition of the record in process()
    now: dict[str, Store[Any]]  # the stores of ``current`` (``Processor.state`` reads it)
    _handles: dict[Partition, dict[str, Store[Any]]]
    _local: dict[Partition, LocalPartition]
    _layers: Layers
    _time: EventTime
    _held: set[Partition]
    _ready: set[Partition]
    _sizes: Sizes  # what the console is shown of the local copies
    _table_of: dict[str, str]  # table topic -> table name
    _streams: tuple[str, ...]  # the input topics processed (not tables)
    copartitioned: bool  # partition p of every input together, in time order
    # (table, partition number) or (input topic, store, partition number) -> view
    _views: dict[tuple[str, int] | tuple[str, str, int], TableStore[Any]]
    # partition number -> table -> view: what ``Processor.table`` finds itself (_bind)
    _tables_at: dict[int, dict[str, TableStore[Any]]]
    _scope: Mapping[str, frozenset[str]] | None  # the seat's: topic -> names kept there
    _tasks: tuple[frozenset[str], ...] | None  # the seat's: topics taken together

    def names(self, topic: str) -> list[str]:
        """The stores (windows and timers included) that input ``topic``'s partitions
        keep, in name order: every one, but for a pipeline's topic only its stages'
        (``Seat.scope``)."""
        kept = None if self._scope is None else self._scope.get(topic)
        return sorted(self.specs if kept is None else (n for n in self.specs if n in kept))

    def sizes(self) -> list[StoreSize]:
        """Each ready partition's stores and tables as their local copies hold them, as
        last committed (``StoreSize``, from ``_sizes``): keys counted by a bounded walk,
        bytes, and a tumbling, hopping or session window's windows open."""
        tables = self.globals.copies()
        copies, ready = {**self._local, **tables}, self._ready | tables.keys()
        return self._sizes.sample(copies, ready, self._time.specs())

    def table(self, name: str) -> TableStore[Any] | GlobalStore[Any]:
        """The table ``name``'s partition of the record being processed (its number), or
        the global table ``name``."""
        current = self.current
        if current is not None:
            view = self._views.get((name, current[1]))
            if view is not None:
                return view
        spec = self.tables.get(name)
        if spec is None:
            whole = self.globals.store(name)
            if whole is not None:
                return whole
            declared = sorted([*self.tables, *self.globals.specs])
            raise KeyError(f"no table {name!r}; the processor declares {declared}")
        if self.current is None:
            raise RuntimeError("Processor.table() gives the table of the record in process()")
        view = TableStore(self._handle(name, (spec.topic, self.current[1])))
        self._views[(name, self.current[1])] = view  # dropped when a copy closes
        self._tables_at.setdefault(self.current[1], {})[name] = view
        return view

    def state_of(self, topic: str, name: str) -> TableStore[Any]:
        """Store ``name`` of input ``topic``'s partition with the current record's
        number, read only (``Processor.state_of``): one line for what cannot be."""
        current = self.current
        if current is not None:
            view = self._views.get((topic, name, current[1]))
            if view is not None:
                if (topic, current[1]) not in self._ready:
                    raise TransactionError(f"{topic}[{current[1]}] {_GONE}")
                return view
        if not self.copartitioned:
            raise RuntimeError(
                "Processor.state_of() reads another input's store: declare "
                "copartitioned = True (its partitions then come together, in time order)"
            )
        if topic not in self._streams:
            raise KeyError(f"{topic!r} is not an input topic; the inputs are {list(self._streams)}")
        if current is not None and self._tasks is not None:  # a pipeline: one stage's
            if not any(current[0] in task and topic in task for task in self._tasks):
                raise RuntimeError(
                    f"Processor.state_of({topic!r}, ...) from a record of {current[0]!r}: "
                    "only a copartitioned stage reads its other inputs' stores"
                )
        self._time.refuse(name)
        if name not in self.specs:
            raise KeyError(f"no store {name!r}; the processor declares {sorted(self.specs)}")
        if current is None:
            raise RuntimeError("Processor.state_of() reads beside the record in process()")
        partition = (topic, current[1])
        if partition not in self._ready:
            raise TransactionError(f"{topic}[{current[1]}] {_GONE}")
        handles = self._handles.setdefault(partition, {})
        handle = handles.get(name)
        if handle is None:  # the sibling has not read it in this copy's life yet
            handle = handles[name] = self._open(name, partition)
        view = TableStore(handle)
        self._views[(topic, name, current[1])] = view  # dropped when a copy closes
        return view

    def read_committed(
        self, name: str, key: bytes
    ) -> tuple[list[tuple[Partition, Any]], list[Partition], list[Partition]]:
        """``key``'s committed value in store ``name`` (decoded) in each restored partition
        held here that has one -- from the local copies, which only committed
        transactions write, never from the open one's layers -- then the partitions
        still restoring, and those read. A ``KeyError`` (one line) for no store."""
        try:
            self._time.refuse(name)
        except KeyError:
            raise KeyError(f"{name!r} is not a store (a window, or the timers)") from None
        if name in self.globals.specs:
            raise KeyError(f"{name!r} is a global table: every instance holds all of it")
        table = self.tables.get(name)
        serde = self.specs.get(name) or (bound_serde(table.serde) if table is not None else None)
        if serde is None:
            declared = sorted([*self.specs, *self.tables])
            raise KeyError(f"no store {name!r}; the processor declares {declared}")
        if table is None:  # a store: in every input partition
            mine = [p for p in self._held if p[0] not in self._table_of]
            mine = [p for p in mine if name in self.names(p[0])]  # a pipeline's: its stage's
        else:  # a table: in its topic's partitions only
            mine = [p for p in self._held if p[0] == table.topic]
        found = []
        for partition in sorted(p for p in mine if p in self._ready):
            local = self._local.get(partition)
            raw = None if local is None else local.get(name, key)
            if raw is not None:
                found.append((partition, serde.loads(raw)))
        ready = [p for p in mine if p in self._ready]
        return found, sorted(p for p in mine if p not in self._ready), sorted(ready)

    def window(self, name: str) -> WindowStore[Any]:
        """The windowed store ``name`` of the partition of the record being processed."""
        return self._time.window(name, self.current)

    def session(self, name: str) -> SessionStore[Any]:
        """The session-windowed store ``name`` of the record's partition."""
        return self._time.session(name, self.current)

    def sliding(self, name: str) -> SlidingStore[Any]:
        """The sliding-windowed store ``name`` of the record's partition."""
        return self._time.sliding(name, self.current)

    def timers(self) -> TimerStore:
        """The timers of the partition of the record being processed."""
        return self._time.timers(self.current)

    def store(self, name: str) -> Store[Any]:
        """The store ``name`` of the partition of the record being processed."""
        handle = self.now.get(name)
        if handle is not None:
            return handle
        self._time.refuse(name)
        if name not in self.specs:
            raise KeyError(f"no store {name!r}; the processor declares {sorted(self.specs)}")
        partition = self.current
        if partition is None:
            raise RuntimeError("Processor.state() gives the store of the record in process()")
        handle = self._open(name, partition)
        handles = self._handles.setdefault(partition, {})
        handles[name] = handle
        if partition == self.current:
            self.now = handles
        return handle

    def _handle(self, table: str, partition: Partition) -> Store[Any]:
        """The store of ``table``'s ``partition`` (kept per partition)."""
        handles = self._handles.get(partition)
        if handles is None:
            handles = self._handles[partition] = {}
        handle = handles.get(table)
        if handle is None:
            local = self._local.get(partition)
            if local is None:
                raise RuntimeError(
                    f"table {table!r}: {partition[0]}[{partition[1]}] is not held here"
                )
            handle = handles[table] = Store(
                table, partition, bound_serde(self.tables[table].serde), self._layers, local
            )
        return handle

    def _open(self, name: str, partition: Partition) -> Store[Any]:
        """A handle on store ``name`` of ``partition`` (windows and timers keep their own:
        ``state()`` never finds those)."""
        local = self._local.get(partition)
        if local is None:
            raise RuntimeError(f"the stores of {partition[0]}[{partition[1]}] are not open")
        return Store(name, partition, self.specs[name], self._layers, local)
