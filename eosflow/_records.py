"""The records a processor sees and the outputs it returns.

One of each is built per consumed and per produced record, so they are
``msgspec.Struct`` objects: their constructor is C, where a slots dataclass's is a Python
function. Measured per object on this machine: a ``Record`` 87 ns against 196 ns, an
``Output`` given keywords 70 ns against 424 ns (``benchmarks/README.md``). They are not
frozen (a frozen one costs more to build) and, like the dataclasses they were, compare
by value, print their fields and are not hashable; ``msgspec.structs.replace`` copies
one with a field changed. Treat them as values all the same: eosflow never mutates them.
"""

from __future__ import annotations

from typing import Generic, NamedTuple

from msgspec import Struct
from typing_extensions import TypeVar

K = TypeVar("K", default=bytes)
V = TypeVar("V", default=bytes)

Partition = tuple[str, int]
"""(topic, partition): the one shape of a partition key, from poll to commit (eosflow's
own; aiokafka's ``TopicPartition`` stays in the adapter)."""


class PartitionOffsets(NamedTuple):
    """Where a held partition stands, as the app sees it without asking the broker:
    ``committed`` (the group's committed offset, or a sink's database position; None
    before one is known), ``position`` (the consumer's next fetch; None before one),
    ``last_stable`` (the last stable offset the last fetch answer gave) and ``lag``
    (records not yet committed: 0 once all is read and nothing is pending, the rest
    being commit markers)."""

    committed: int | None
    position: int | None
    last_stable: int
    lag: int


def lag_of(stable: int, position: int | None, base: int, pending: bool) -> int:
    """The lag of a partition committed up to ``base`` (an offset, or the database's
    position for a sink): the last stable offset minus it -- or 0 once the consumer has
    read up to the last stable offset and nothing it read is left to commit
    (``pending`` false). The gap is then commit markers and aborted records: every
    transaction on the input ends with a marker after its last record, so the committed
    offset never reaches the last stable offset by itself."""
    if position is not None and position >= stable and not pending:
        return 0
    return max(0, stable - base)


class RestoreProgress(NamedTuple):
    """One store (or table) of a partition held back while its local copy is restored:
    ``applied`` records so far, read ``towards`` an offset of its changelog (or table
    topic; None before it is known), for ``seconds``."""

    partition: Partition
    store: str
    applied: int
    towards: int | None
    seconds: float


ALL_PARTITIONS = -1
"""A ``StoreSize``'s partition number for a global table: one copy of every partition."""


class StoreSize(NamedTuple):
    """A store's (or table's) local copy of one ready partition, as last committed (a
    global table's: of every partition, ``ALL_PARTITIONS``, as read so far):
    ``keys`` as counted by the last complete walk over it (None before one; eosflow's
    own keys left out), ``bytes`` its files and memtables as RocksDB tells them. For a
    tumbling or hopping window: the ``windows`` holding values, the ``oldest_ms`` one's
    start and the partition's ``stream_time_ms`` (None before a record; all three None
    for other stores)."""

    partition: Partition
    store: str
    keys: int | None
    bytes: int
    windows: int | None = None
    oldest_ms: int | None = None
    stream_time_ms: int | None = None


class StateNow(NamedTuple):
    """A runtime's state, sampled for the console: what restores, and each ready local
    copy's size."""

    restoring: list[RestoreProgress]
    stores: list[StoreSize]


class Record(Struct, Generic[K, V]):
    """One consumed record. ``timestamp`` is in milliseconds since the epoch, as Kafka
    stores it; ``headers`` keep Kafka's order and may repeat a key. ``key`` and
    ``value`` are bytes unless the topic declares otherwise (``Processor.topics``:
    ``Record[str, Order]``); a tombstone's value is None either way."""

    topic: str
    partition: int
    offset: int
    key: K | None
    value: V | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int = -1


class Output(Struct):
    """One record to produce inside the transaction. ``partition=None`` lets the producer
    choose by key (murmur2, as the Java client). ``key`` and ``value`` are bytes, or: a
    ``str`` (encoded as UTF-8), a pydantic model (its JSON), or what the topic's
    declaration takes (``Processor.topics``), encoded when ``process`` returns it (at no
    cost for bytes); anything else stops the app or dead-letters the record, per the
    error policy, naming the record. ``timestamp`` (ms since the epoch) is the record's
    Kafka timestamp; None: the producer's clock when it is batched (a regrouped record
    keeps its input's, so event time carries across a stage)."""

    topic: str
    value: object
    key: object = None
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int | None = None
    timestamp: int | None = None


class Regroup(Struct):
    """What a stage returns (beside ``Output``\\ s) to send a record onward under a new
    key: to its own repartition topic, partitioned by ``key``, read by the stages that
    name it among their inputs. It keeps the input record's event time, unless
    ``timestamp`` (ms since the epoch) gives another: a ``process_batch`` stage's
    ``Regroup`` carries the latest event time among its records otherwise. ``key`` and
    ``value`` are bytes, ``str``, a pydantic model, or what the reading stages declare for
    the stage's name in ``topics``."""

    key: object
    value: object
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None
