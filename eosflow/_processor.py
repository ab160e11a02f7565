"""The user's side of eosflow: subclass ``Processor`` and override ``process``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from ._errors import ConfigError
from ._native import bind_seat, named_as
from ._observe import Observer
from ._records import Output, Record, Regroup
from ._state import CURRENT, NOTHING, Seat, seat_of
from ._typed import as_bytes

if TYPE_CHECKING:
    from ._config import EosConfig
    from ._schemas import Schemaful, SchemaRegistrySettings
    from ._state import (
        BatchState,
        GlobalStore,
        GlobalTable,
        Serde,
        Session,
        SessionStore,
        Sliding,
        SlidingStore,
        Store,
        Table,
        TableStore,
        Timer,
        TimerStore,
        Window,
        WindowSpec,
        WindowStore,
    )
    from ._typed import Topic


class _StoresOfTheRecord(Protocol):
    """What the runtime gives a processor with stores (``_state.Stores``)."""

    def store(self, name: str) -> Store[Any]: ...

    def window(self, name: str) -> WindowStore[Any]: ...

    def session(self, name: str) -> SessionStore[Any]: ...

    def sliding(self, name: str) -> SlidingStore[Any]: ...

    def timers(self) -> TimerStore: ...

    def table(self, name: str) -> TableStore[Any] | GlobalStore[Any]: ...

    def state_of(self, topic: str, name: str) -> TableStore[Any]: ...


ProcessResult = Output | Regroup | Iterable[Output | Regroup] | None
Encode = Callable[[Output], Output]  # an output's key and value, by its topic's declaration

_NO_OBSERVER = Observer()  # what ``observer`` is outside a running app


class Lifecycle:
    """What every object an ``EosApp`` runs has -- a ``Processor`` and a
    ``PostgresSink`` alike: the lifecycle hooks and the app's observers. The runtime
    keeps its own state in a ``Seat`` (``_seat``), never in the instance."""

    @property
    def observer(self) -> Observer:
        """The running app's observers (``EosApp``'s): report events of your own to them;
        the Spark offload reports each job (``Observer.spark_job``). Outside a running
        app, an observer that ignores everything. Read only."""
        seat = seat_of(self)
        return _NO_OBSERVER if seat is None else seat.observer

    @observer.setter
    def observer(self, value: object) -> NoReturn:
        raise ConfigError(
            f"{type(self).__name__}.observer is eosflow's (the app's observers, "
            "Processor.observer): name your attribute otherwise"
        )

    def configure(self, config: EosConfig) -> None:
        """Called once with the app's config, before ``on_start``."""

    async def on_start(self) -> None:
        """Called once before the first record."""

    async def on_stop(self) -> None:
        """Called once after the last transaction ended."""

    async def on_assigned(self, partitions: frozenset[tuple[str, int]]) -> None:
        """Partitions newly assigned, after their committed offsets were fetched."""

    async def on_revoked(self, partitions: frozenset[tuple[str, int]]) -> None:
        """Partitions about to move away, after any transaction in flight has ended."""


class Processor(Lifecycle):
    """Transforms consumed records into outputs, inside eosflow's transactions.

    ``process`` is called once per record (in offset order within a partition) and
    returns None, one ``Output`` or an iterable of them. Everything it returns for the
    records of one transaction is produced and committed atomically with their offsets.
    A record may be processed more than once (after an abort or a crash, or when work
    done ahead of a commit is dropped -- see ``EosConfig.process_ahead``), but its outputs
    become visible to read_committed readers exactly once, so ``process`` must not have
    side effects outside Kafka that cannot be repeated.

    Override ``process_batch`` to transform a whole transaction's records at once (the
    Spark offload does); the default calls ``process`` for each record. A batch keeps
    stores and tumbling or hopping windows through ``self.batch`` (``BatchState``): it
    merges per-key partial aggregates, and windows close after the batch.

    **State.** Declare named stores in ``stores`` (name -> ``Serde``: ``eosflow.JSON``,
    ``eosflow.BYTES``, or any object with ``dumps``/``loads``) and use
    ``self.state(name)`` in ``process``: the store of the record's input partition. Its
    writes commit in the same Kafka transaction as the outputs (through a compacted
    changelog topic) and are rolled back with it, so state is exactly once too::

        class Count(eosflow.Processor):
            stores = {"counts": eosflow.JSON}

            async def process(self, record):
                counts = self.state("counts")
                n = counts.get(record.key, 0) + 1
                counts.put(record.key, n)
                return eosflow.Output("counts", str(n), key=record.key)

    **Time.** Declare windowed stores in ``windows`` (name -> ``eosflow.Tumbling``,
    ``eosflow.Hopping``, ``eosflow.Session`` or ``eosflow.Sliding``) and use
    ``self.window(name)`` (a session window: ``self.session(name)``, a sliding one:
    ``self.sliding(name)``) in ``process``. A record's event
    time is what ``timestamp`` returns (its Kafka timestamp by default); a window closes
    once its partition's stream time (the largest event time processed there) passes its
    end plus its grace, and ``closed`` is then called once per key with the final value,
    its outputs committed with the window's deletion::

        class Clicks(eosflow.Processor):
            windows = {"clicks": eosflow.Tumbling(size_s=300, grace_s=10)}

            async def process(self, record):
                self.window("clicks").update(record.key, lambda n: n + 1, 0)

            async def closed(self, key, window, value):
                return eosflow.Output("clicks-5m", str(value), key=key)

    **Tables.** Declare tables in ``tables`` (name -> ``eosflow.Table(topic)``) and read
    ``self.table(name).get(key)`` in ``process``: the latest row of ``key`` in the table
    topic (co-partitioned with the input) among the rows merged before the record --
    rows and records are merged in timestamp order, so for input that is in the topics
    before it is read a join's outputs depend on the topics alone (live, a row and a
    record that race may land either way: ``docs/howto/tables.md``)::

        class Enrich(eosflow.Processor):
            tables = {"customers": eosflow.Table("customers")}

            async def process(self, record):
                customer = self.table("customers").get(record.key)
                return eosflow.Output("enriched", json.dumps([record.value.decode(), customer]))

    Override ``fire`` to have **timers**: ``self.timers.at(time_ms, key, payload)`` in
    ``process`` sets one, and ``fire(timer)`` is called once it is due (its partition's
    stream time reached it), its outputs committed with the timer's deletion.

    **Co-partitioned inputs.** With ``copartitioned = True`` the input topics are one
    stream of tasks: partition p of every input goes to one instance, their records are
    processed in timestamp order across the topics (as rows and records with tables),
    and ``self.state_of(topic, name)`` reads another input's store of the record's
    partition number. Each input writes its own stores; a stream-stream join reads the
    other side's (``examples/payments.py``).

    eosflow writes nothing into a processor: what these methods return is kept by the
    running app (its seat, ``_state/_seat.py``) and found from ``process``, the hooks
    and the tasks they start (``asyncio.to_thread`` included); a thread started with
    ``loop.run_in_executor`` does not see it.
    """

    # The declarations are read from the processor object: a class sets them in its
    # body, or an instance in ``__init__`` (from its settings) -- so they are plain
    # attributes, not ClassVars, and an instance's assignment type-checks.
    stores: Mapping[str, Serde | Schemaful | None] = {}
    windows: Mapping[str, WindowSpec | Session | Sliding] = {}
    tables: Mapping[str, Table | GlobalTable] = {}
    #: the inputs are co-partitioned (the same partition count, keyed alike): partition p
    #: of each is held by one instance (range assignment) and their records are taken
    #: in timestamp order; ``state_of`` reads a sibling's store. Off: each input
    #: partition is on its own, assigned round robin.
    copartitioned: bool = False
    #: what topics' keys and values are (name -> ``eosflow.Topic``): an input topic's
    #: records reach ``process`` decoded (``Record[K, V]``), an output topic's
    #: ``Output`` takes the objects; undeclared topics are bytes as before
    topics: Mapping[str, Topic] = {}
    #: the schema registry of ``eosflow.Avro``/``eosflow.JsonSchema`` declarations
    #: (None: ``EOSFLOW_SCHEMA_REGISTRY_*``, read only if a declaration needs it)
    schema_registry: SchemaRegistrySettings | None = None

    def state(self, name: str) -> Store[Any]:
        """The store ``name`` of the input partition of the record being processed
        (declared in ``stores``). Only valid inside ``process``."""
        seat = CURRENT.get()  # the per-record path of every stateful stage: inline
        if seat is not None and seat.stores is not None:
            if seat.processor is self or name in seat.reach.get(id(self), NOTHING):
                store: Store[Any] = seat.stores.store(name)
                return store
        return _stores(self, "state", name, "store", "stores").store(name)

    def window(self, name: str) -> WindowStore[Any]:
        """The windowed store ``name`` of the input partition of the record being
        processed (declared in ``windows``). Only valid inside ``process``."""
        seat = CURRENT.get()  # the per-record path of windowed apps: seat_of inline
        if seat is not None and seat.processor is self:
            handle: WindowStore[Any] | None = seat.windows.get(name)
            if handle is not None:
                return handle
        return _stores(self, "window", name, "window", "windows").window(name)

    def session(self, name: str) -> SessionStore[Any]:
        """The session-windowed store ``name`` (declared in ``windows`` with
        ``eosflow.Session``) of the input partition of the record being processed. Only
        valid inside ``process``."""
        return _stores(self, "session", name, "window", "windows").session(name)

    def sliding(self, name: str) -> SlidingStore[Any]:
        """The sliding-windowed store ``name`` (declared in ``windows`` with
        ``eosflow.Sliding``) of the input partition of the record being processed:
        ``add(key, value)``. Only valid inside ``process``."""
        return _stores(self, "sliding", name, "window", "windows").sliding(name)

    def table(self, name: str) -> TableStore[Any] | GlobalStore[Any]:
        """The table ``name`` (declared in ``tables``) as of the record being processed:
        the partition of its topic with the record's partition number, holding the rows
        merged before the record in timestamp order (``get(key)``: for records in
        timestamp order, the row as of the record's time; a late record sees rows newer
        than itself); for a ``GlobalTable``, the whole topic as read so far. Only valid
        inside ``process``."""
        seat = CURRENT.get()  # a join's per-record path: seat_of inline
        if seat is not None and seat.processor is self:
            view: TableStore[Any] | None = seat.tables.get(name)
            if view is not None:
                return view
        return _stores(self, "table", name, "table", "tables").table(name)

    def state_of(self, topic: str, name: str) -> TableStore[Any]:
        """Read only: the store ``name`` of input ``topic``'s partition with the record's
        partition number, as the transaction sees it (its own writes included) -- with
        ``copartitioned``, a stream-stream join's other side. Records of both partitions
        are taken in timestamp order, so it holds what that input had up to the
        record's timestamp. Only valid inside ``process``."""
        stores = _stores(self, "state_of", name, "store", "stores")
        seat = seat_of(self)  # a pipeline's stage may name an input by its stage
        return stores.state_of(topic if seat is None else seat.aliases.get(topic, topic), name)

    @property
    def batch(self) -> BatchState:
        """The state of the ``process_batch`` call in progress, with stores or tumbling
        and hopping windows declared: ``windows(name)`` gives each record's open
        windows, ``merge(...)`` folds a key's partial aggregate into a window or a
        store. Windows the batch closed go to ``closed`` after ``process_batch``."""
        seat = seat_of(self)
        batch: BatchState | None = None if seat is None else seat.batch
        if batch is None:
            raise RuntimeError(
                f"Processor.batch: no batch is open; declare stores or windows in "
                f"{type(self).__name__} and use it from process_batch()"
            )
        return batch

    def timestamp(self, record: Record) -> int:
        """A record's event time in milliseconds since the epoch, for its windows: its
        Kafka timestamp unless overridden (read from the value, say). Must return an
        int; anything else is a processing error (dead-lettered or fatal)."""
        return record.timestamp

    @property
    def timers(self) -> TimerStore:
        """The timers of the input partition of the record being processed (or of the
        timer being fired): ``at(time_ms, key, payload)`` in event time,
        ``after(seconds, key, payload)`` on the wall clock, ``get(key)``,
        ``cancel(key)`` (``wall_clock=True`` for the latter kind). Override ``fire`` to
        have them."""
        seat = seat_of(self)
        stores: _StoresOfTheRecord | None = None if seat is None else seat.stores
        if stores is None:
            raise RuntimeError(
                f"Processor.timers: none is open; override {type(self).__name__}.fire "
                "and use timers from process()"
            )
        return stores.timers()

    async def fire(self, timer: Timer) -> ProcessResult:
        """A timer is due: its partition's stream time reached ``timer.time_ms`` -- then
        it is called in the transaction of the record that moved stream time there -- or,
        for ``timer.wall_clock``, the wall clock did, and it is called in a transaction
        at most about ``commit_interval_s`` later (one of its own when no records come,
        committing the partition's offset again). Once per timer, in the transaction
        that deletes it; what it returns is produced in that transaction. A raise stops
        the app, or with a dead-letter topic dead-letters the record (an event-time
        timer's) or the timer (key and payload, a wall-clock timer's). Override it to
        have timers (``self.timers``)."""
        return None

    async def closed(self, key: bytes, window: Window, value: Any) -> ProcessResult:
        """A window closed: ``value`` is ``key``'s final value in ``window``. Called once
        per key, in the transaction of the record whose event time closed it; what it
        returns is produced in that transaction (the final result)."""
        return None

    async def process(self, record: Record[Any, Any]) -> ProcessResult:
        # Record[Any, Any]: a subclass may say what its declared topics decode to
        # (``Record[str, Order]``) and still override this under mypy --strict
        raise NotImplementedError("override Processor.process or Processor.process_batch")

    async def process_batch(self, records: Sequence[Record]) -> list[Output]:
        out: list[Output] = []
        for record in records:
            out.extend(as_outputs(await self.process(record)))
        return out


def _stores(
    processor: Processor, call: str, name: str, what: str, declared: str
) -> _StoresOfTheRecord:
    """The stores the runtime gave ``processor`` (its seat's), or a ``RuntimeError``
    saying what to declare: ``call`` is the method asked, outside ``process``."""
    seat = seat_of(processor)
    stores: _StoresOfTheRecord | None = None if seat is None else seat.stores
    if stores is None:
        raise RuntimeError(
            f"Processor.{call}({name!r}): no {what} is open; declare it in "
            f"{type(processor).__name__}.{declared} and call {call}() from process()"
        )
    if seat is not None and seat.processor is not processor:  # a pipeline's stage
        # its own store, window or table (a window asked as a store: the usual answer)
        if name not in seat.reach.get(id(processor), NOTHING):
            raise KeyError(
                f"no {what} {name!r} in {type(processor).__name__}.{declared} "
                f"{sorted(getattr(processor, declared, None) or {})}: a stage reaches "
                "only what it declares"
            )
    return stores


def as_outputs(result: object, encode: Encode | None = None) -> list[Output]:
    """``process``'s result as a list of outputs whose keys and values are bytes:
    ``encode`` first (the topics' declarations: ``_typed.Typing.encode``), then a
    ``str`` as UTF-8, a pydantic model as its JSON. Anything else is a ``TypeError``
    saying what was returned; the caller names the record and applies the error policy."""
    if result is None:
        return []
    if isinstance(result, Output):
        return [normalised(result, encode)]
    if isinstance(result, (str, bytes, bytearray, dict)) or not isinstance(result, Iterable):
        raise TypeError(
            f"process() returned {type(result).__name__}; expected an Output, "
            "an iterable of Outputs, or None"
        )
    out = list(result)
    for i, item in enumerate(out):
        if not isinstance(item, Output):
            raise TypeError(
                f"process() returned an iterable holding {type(item).__name__} "
                f"(item {i}); expected Outputs"
            )
        out[i] = normalised(item, encode)
    return out


def normalised(o: Output, encode: Encode | None = None) -> Output:
    """``o`` with its key and value as bytes: by ``encode`` (the topics' declarations,
    ``_typed.Typing.encode``, which also takes the rest) or else a ``str`` as UTF-8 and
    a pydantic model as its JSON; other types are a ``TypeError`` naming the field."""
    key, value = o.key, o.value
    if (key is None or type(key) is bytes) and (value is None or type(value) is bytes):
        return o
    if encode is not None:
        return encode(o)
    return Output(
        o.topic,
        as_bytes(value, "value", o.topic),
        as_bytes(key, "key", o.topic),
        o.headers,
        o.partition,
        o.timestamp,
    )


def overrides_batch(processor: Processor) -> bool:
    return type(processor).process_batch is not Processor.process_batch


PYTHON_PATH: dict[str, Callable[..., Any]] = {
    name: Processor.__dict__[name] for name in ("state", "window", "table")
}
"""``Processor``'s per-record lookups in Python: what runs without the compiled
extension, what the compiled ones fall back to, and what they are held to
(``tests/unit/test_native_seat.py``)."""


def _compile() -> None:
    """Put the compiled lookups (``eosflow._native.bind_seat``) in place of the methods
    above where the extension is built: the seat read from its context variable and the
    handle found by name in C, one Python frame fewer a call (``benchmarks/README.md``);
    any call they do not answer at once goes to the Python method."""
    compiled = bind_seat(Seat, CURRENT, PYTHON_PATH)
    if compiled is not None:
        for name, function in compiled.items():
            setattr(Processor, name, named_as(function, PYTHON_PATH[name]))


_compile()
