"""Tables: a topic materialised per partition beside the stream that reads it.

A processor declares ``tables = {"customers": eosflow.Table("customers")}`` and reads
``self.table("customers").get(key)`` in ``process``: the latest value of ``key`` in the
table topic's partition with the record's partition number.

How it stays exactly once:

- **The table topic is consumed by the group**, beside the input topics, so its read
  position is a committed offset like theirs: each table record is applied to the
  table's local copy in the transaction that commits its offset (a ``None`` value
  deletes the key; a record without a key is skipped, as in Kafka Streams). There is no
  changelog: the topic is its own. After a crash the table is rebuilt from the topic up
  to the group's committed offset (``_table_restore``), so it holds exactly the rows the
  committed outputs saw.
- **Co-partitioning.** A stream record of partition p reads table partition p, which
  the same instance must hold: the group assigns with a range assignor (classic:
  aiokafka's ``RangePartitionAssignor``; the consumer protocol: the broker's ``range``,
  which gives partition p of every topic to one member when their partition counts
  match). A table topic whose partition count differs from the input's is a one-line
  ``ConfigError`` at start (``check_partitions``).
- **Event-time synchronisation** (``_sync``): which row a stream record sees depends on
  the records' timestamps, never on which partition was fetched first.

Trade-off: the table topic's records are processed in transactions like the input's,
so a large table being caught up takes transaction capacity; a table only looked up by
another key needs the whole topic on every instance (a global table), which this is not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from .._errors import ConfigError
from .._native import bind_table, named_as
from .._records import Partition
from .._schemas import Schemaful
from ._global import GlobalTable, check_serde
from ._layers import MISSING
from ._store import BYTES, JSON, RESERVED_KEY, Serde, Store, store_key

if TYPE_CHECKING:
    from .._config import EosConfig
    from .._records import Record

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Table:
    """A table topic, read as the latest value per key (``Processor.tables``).

    ``topic``: the table's topic, co-partitioned with the input (the same partition
    count, keys partitioned the same way: Kafka's default partitioner on both sides).
    ``serde``: how its values are read (JSON by default; ``eosflow.BYTES`` keeps them raw;
    ``eosflow.Avro(M)``, ``JsonSchema`` or ``Protobuf``: by their writer's schema in the
    app's schema registry, each schema id fetched once -- ``_typed`` binds it).
    ``max_idle_s``: how long records wait, once the table has been read to its end, for
    a row still on its way (Kafka Streams' ``max.task.idle.ms``; ``_sync``): 0 by
    default, no wait -- a row written after the record it would have joined was
    processed is then not seen by it.
    """

    topic: str
    serde: Serde | Schemaful = JSON
    max_idle_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigError(f"eosflow.Table: topic must be a topic name, not {self.topic!r}")
        idle = self.max_idle_s
        if not isinstance(idle, (int, float)) or isinstance(idle, bool) or not 0 <= idle < 1e9:
            raise ConfigError(
                f"eosflow.Table({self.topic!r}): max_idle_s must be seconds >= 0, not {idle!r}"
            )
        check_serde(f"eosflow.Table({self.topic!r})", self.serde)


def declared_tables(
    processor: object, inputs: tuple[str, ...] = ()
) -> dict[str, Table | GlobalTable]:
    """The tables ``processor`` declares (its ``tables`` mapping: name -> ``Table`` or
    ``GlobalTable``), checked: a one-line ``ConfigError`` for anything else, for a name a
    store or window has too, for two tables of one topic, and for a table topic among
    ``inputs``."""
    raw = getattr(processor, "tables", None) or {}
    kind = type(processor).__name__
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{kind}.tables must map names to tables (e.g. "
            f"{{'customers': eosflow.Table('customers')}}), not {type(raw).__name__}"
        )
    taken = {
        **(getattr(processor, "stores", None) or {}),
        **(getattr(processor, "windows", None) or {}),
    }
    out: dict[str, Table | GlobalTable] = {}
    topics: dict[str, str] = {}
    for name, spec in raw.items():
        if not isinstance(name, str) or not isinstance(spec, (Table, GlobalTable)):
            raise ConfigError(
                f"{kind}.tables[{name!r}]: expected a name and eosflow.Table or "
                f"eosflow.GlobalTable, got {spec!r}"
            )
        if name in taken:
            raise ConfigError(
                f"{kind}: {name!r} names both a table and a store or window; rename one"
            )
        if spec.topic in topics:
            raise ConfigError(
                f"{kind}: tables {topics[spec.topic]!r} and {name!r} both read topic {spec.topic!r}"
            )
        if spec.topic in inputs:
            raise ConfigError(
                f"{kind}.tables[{name!r}]: topic {spec.topic!r} is an input topic too; "
                "a topic is either processed or read as a table"
            )
        topics[spec.topic] = name
        out[name] = spec
    return out


def check_partitions(
    tables: Mapping[str, Table],
    inputs: tuple[str, ...],
    counts: Mapping[str, int],
    copartitioned: bool = False,
    tasks: tuple[frozenset[str], ...] | None = None,
) -> None:
    """Every table topic has the input topics' partition count (``counts``: topic ->
    partitions), and so has every input when ``copartitioned``: a one-line
    ``ConfigError`` naming both otherwise. With ``tasks`` (a pipeline's groups of topics
    taken together, ``Seat.tasks``) within each group alone."""
    if tasks is not None:
        for task in tasks:
            first, *rest = sorted(task)
            for topic in rest:
                if counts[topic] != counts[first]:
                    raise ConfigError(
                        f"a pipeline stage's inputs and tables are read together, partition "
                        f"by partition: topic {first!r} has {counts[first]} partitions and "
                        f"{topic!r} {counts[topic]}; give them one count (a repartition "
                        "topic's: Stage.partitions)"
                    )
        return
    if copartitioned:
        for topic in inputs[1:]:
            if counts[topic] != counts[inputs[0]]:
                raise ConfigError(
                    f"copartitioned inputs: topic {inputs[0]!r} has {counts[inputs[0]]} "
                    f"partitions and {topic!r} {counts[topic]}; co-partitioned topics need "
                    "the same partition count and key partitioning"
                )
    for name, table in sorted(tables.items()):
        for topic in inputs:
            if counts[table.topic] != counts[topic]:
                raise ConfigError(
                    f"table {name!r}: topic {table.topic!r} has {counts[table.topic]} "
                    f"partitions and input topic {topic!r} {counts[topic]}; a table must be "
                    "co-partitioned with the input (the same partition count and key "
                    "partitioning)"
                )


def subscribed(config: EosConfig, tables: Mapping[str, Table | GlobalTable]) -> EosConfig:
    """``config`` whose ``input_topics`` (what the group subscribes to) include the
    ``tables``' topics, after the input's (the processor's config is left as it is);
    a global table's topic is read whole by each instance, not by the group."""
    mine = {t.topic for t in tables.values() if isinstance(t, Table)}
    extra = sorted(mine - set(config.input_topics))
    if not extra:
        return config
    return config.model_copy(update={"input_topics": (*config.input_topics, *extra)})


class TableStore(Generic[V]):
    """A read-only view of one partition's store: a table's, as ``Processor.table(name)``
    gives it -- a key's value is the latest among the rows merged before the record in
    timestamp order (``_sync``: for a late record, rows newer than itself too) -- or
    another co-partitioned input's, as ``Processor.state_of`` gives it (what that
    input's records merged before it wrote)."""

    __slots__ = ("_layers", "_loads", "_read", "_slot", "_store")

    def __init__(self, store: Store[V]) -> None:
        self._store = store
        # the hot path, ``Store.raw`` in one call: the layers, then the local copy's
        # read; and no call at all for raw bytes (BYTES.loads is identity)
        self._layers, self._slot = store.layers, (store.name, store.partition)
        self._read = store.read_local
        self._loads = None if store.serde is BYTES else store.serde.loads

    def __repr__(self) -> str:
        topic, p = self._store.partition
        return f"<eosflow.TableStore {self._store.name!r} of {topic}[{p}]>"

    @property
    def partition(self) -> Partition:
        return self._store.partition

    @overload
    def get(self, key: bytes | str) -> V | None: ...

    @overload
    def get(self, key: bytes | str, default: V) -> V: ...

    def get(self, key: bytes | str, default: V | None = None) -> V | None:
        """The table's value of ``key``, or ``default`` when it has none."""
        if type(key) is not bytes or key == RESERVED_KEY:
            key = store_key(key)
        layers, slot = self._layers, self._slot
        writes = layers.open.get(slot)
        raw = MISSING if writes is None else writes.get(key, MISSING)
        if raw is MISSING:
            sealed = layers.sealed  # (empty but while a transaction commits)
            if sealed and (writes := sealed.get(slot)) is not None:
                raw = writes.get(key, MISSING)
            if raw is MISSING:
                raw = self._read(key)
        if raw is None:
            return default
        loads = self._loads
        return raw if loads is None else loads(raw)  # type: ignore[return-value,arg-type]

    def __contains__(self, key: bytes | str) -> bool:
        return key in self._store

    def range(
        self, start: bytes | str | None = None, end: bytes | str | None = None
    ) -> Iterator[tuple[bytes, V]]:
        """(key, value) for every key of the partition in ``[start, end)``, byte order."""
        return self._store.range(start, end)


PYTHON_GET: Callable[..., Any] = TableStore.__dict__["get"]
"""``TableStore.get`` in Python: what runs without the compiled extension, and what the
compiled one is held to (``tests/unit/test_native_store.py``)."""


def _compile() -> None:
    """The compiled ``get`` (``eosflow._native.bind_table``) in place of the Python one,
    where the extension is built: the store's compiled read path with the view's slots."""
    compiled = bind_table(TableStore, PYTHON_GET)
    if compiled is not None:
        setattr(TableStore, "get", named_as(compiled, PYTHON_GET))  # noqa: B010


_compile()


def apply(store: Store[Any], record: Record) -> None:
    """A table record into its partition's store (in the open transaction): the value
    as it is (None deletes). A record without a key is skipped."""
    key = record.key
    if key is not None and key != RESERVED_KEY:
        store.put_raw(key if type(key) is bytes else store_key(key), record.value)
