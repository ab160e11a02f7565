"""``BatchState``: stores and windows for ``process_batch`` (a batch engine such as Spark).

A batch processor does not see one record at a time: it aggregates a transaction's
records at once (Spark's ``groupBy``) and merges each key's partial aggregate into the
state. What the per-record path does around each ``process`` is done here around the
batch, so that the state and the final results are the per-record path's whenever the
merge is associative and commutative (a count, a sum, a max, a set union):

- **before** ``process_batch``: each record's event time is taken in offset order, per
  input partition, and stream time moves up to it as it would record by record. A
  record's windows are those still open at that stream time (``BatchState.windows``).
  A record none of whose windows of one name is open is **late**: counted (reported
  when the transaction commits), or, with a dead-letter topic, dead-lettered and left
  out of the batch -- as on the per-record path;
- **in** ``process_batch``: partials are merged (``BatchState.merge``) into the windows
  the batch's records are in -- also one that a later record of the batch closed: its
  final is still to come -- or into a store;
- **after** it: the windows the batch's stream time closed are handed to ``closed`` and
  deleted, per input partition, windows in start order, keys in byte order.

Failure modes: a ``timestamp()`` that raises dead-letters its record (or stops the
app). With a dead-letter topic, a raise in ``process_batch`` or ``closed`` takes back
every write of the batch, stream time included, and dead-letters its records; without
one the app stops and the transaction aborts. A ``TransactionError`` (retry) aborts
the transaction, which drops the batch's writes.

Only stores and tumbling or hopping windows: session windows join across records,
a sliding window is per record, and timers fire in a record's transaction, so a batch
processor declaring any of them is refused at start (``check_batch``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import ConfigError, FatalError, TransactionError
from .._records import Partition
from ._seat import Seat
from ._store import Store, store_key
from ._windows import LateRecord, WindowSpec, WindowStore, data_key, event_time

if TYPE_CHECKING:
    from .._records import Record
    from ._layers import Layers
    from ._time import AnySpec

V = TypeVar("V")
P = TypeVar("P")
Outputs = list[Any]
Failed = Callable[[Sequence["Record"], Exception], Outputs]


def check_batch(kind: str, windows: Mapping[str, AnySpec], timers: bool) -> None:
    """A one-line ``ConfigError`` for a processor (class ``kind``) that overrides
    ``process_batch`` but declares what a batch cannot keep: timers, or session or
    sliding windows."""
    if timers:
        raise ConfigError(
            f"{kind} overrides process_batch and fire: timers fire in a record's "
            "transaction; use process() for them"
        )
    for name, spec in windows.items():
        if not isinstance(spec, WindowSpec):
            raise ConfigError(
                f"{kind} overrides process_batch: its window {name!r} is a "
                f"{type(spec).__name__}, which is per record; a batch keeps stores and "
                "Tumbling or Hopping windows"
            )


class BatchState:
    """The state of one ``process_batch`` call (``Processor.batch``): which windows each
    record is in, and the merge of partial aggregates into windows and stores.

    ``records`` are the records ``process_batch`` got (late ones left out when they are
    dead-lettered); indices in ``windows`` are into it."""

    __slots__ = (
        "_backing",
        "_floors",
        "_handles",
        "_opened",
        "_seen",
        "_specs",
        "_stores",
        "_taken",
        "records",
    )

    def __init__(
        self,
        store: Callable[[str, Partition], Store[Any]],
        specs: Mapping[str, WindowSpec],
        stores: Sequence[str],
    ) -> None:
        self.records: list[Record] = []
        self._backing = store
        self._taken: dict[tuple[str, Partition], Store[Any]] = {}
        self._specs = specs
        self._stores = stores
        self._opened: dict[str, list[tuple[int, int]]] = {name: [] for name in specs}
        # the partitions of the records kept, with their windows
        self._handles: dict[Partition, list[WindowStore[Any]]] = {}
        # (partition, window name, start) of every window a kept record is in while open
        self._seen: set[tuple[Partition, str, int]] = set()
        # (partition, window name) -> the last window closed before the batch (None:
        # none): merges go above it, and closing after the batch starts past it
        self._floors: dict[tuple[Partition, str], int | None] = {}

    def windows(self, name: str) -> list[tuple[int, int]]:
        """(record index, window start in ms) for every window ``name`` each record is
        in and that was open at its partition's stream time then, in record order (a
        hopping window's record appears once per window)."""
        found = self._opened.get(name)
        if found is None:
            raise KeyError(f"no window {name!r}; the processor declares {sorted(self._specs)}")
        return found

    def store(self, name: str, partition: Partition) -> Store[Any]:
        """The store ``name`` of input ``partition`` (one of the batch's)."""
        if name not in self._stores:
            raise KeyError(f"no store {name!r}; the processor declares {sorted(self._stores)}")
        self._partition(partition)
        return self._store(name, partition)

    def _store(self, name: str, partition: Partition) -> Store[Any]:
        handle = self._taken.get((name, partition))
        if handle is None:
            handle = self._taken[(name, partition)] = self._backing(name, partition)
        return handle

    def merge(
        self,
        name: str,
        partition: Partition,
        key: bytes | str,
        partial: P,
        fn: Callable[[V | None, P], V],
        start_ms: int | None = None,
    ) -> V:
        """Merge ``partial`` into ``key``'s value: ``fn(old, partial)``, ``old`` None
        when the key has none, in the store ``name`` of ``partition`` or, for a window,
        in the window of ``name`` starting at ``start_ms`` (one ``windows(name)`` gave
        for that partition). Returns the new value. Writes join the transaction."""
        spec = self._specs.get(name)
        if spec is None:
            store = self.store(name, partition)
            value = fn(store.get(key), partial)
            store.put(key, value)
            return value
        if start_ms is None:
            raise TypeError(f"merge into window {name!r} needs start_ms (a window's start)")
        if (partition, name, start_ms) not in self._seen:
            topic, p = partition
            raise ValueError(
                f"window {name!r} of {topic}[{p}] starting at {start_ms} ms: none of the "
                "batch's records is in it while open (merge into windows that windows() gave)"
            )
        data, dk = self._store(name, partition), data_key(start_ms, store_key(key))
        raw = data.get(dk)
        value = fn(None if raw is None else spec.serde.loads(raw), partial)
        data.put(dk, spec.serde.dumps(value))
        return value

    def narrowed(self, indices: Sequence[int], names: Collection[str]) -> BatchState:
        """The same state seen by a processor that got only ``records[i]`` for ``i`` in
        ``indices`` (increasing) and declares only ``names``: a pipeline's batch stage,
        handed its topics' records. Its ``windows`` index into its records, and name
        only its own; what it writes is shared."""
        specs = {n: spec for n, spec in self._specs.items() if n in names}
        view = BatchState(self._backing, specs, [n for n in self._stores if n in names])
        view.records = [self.records[i] for i in indices]
        position = {i: j for j, i in enumerate(indices)}
        view._opened = {
            name: [(position[i], s) for i, s in opened if i in position]
            for name, opened in self._opened.items()
            if name in specs
        }
        view._taken, view._handles = self._taken, self._handles
        view._seen, view._floors = self._seen, self._floors
        return view

    def _partition(self, partition: Partition) -> None:
        if partition not in self._handles:
            topic, p = partition
            raise ValueError(f"no record of {topic}[{p}] is in this batch")

    # --- the runtime's side ---------------------------------------------------------

    def take(
        self,
        processor: Any,
        records: Sequence[Record],
        handles: Callable[[Partition], list[WindowStore[Any]]],
        late: Callable[[str], None],
        failed: Failed,
        layers: Layers,
    ) -> Outputs:
        """Step through ``records`` as the per-record path would before each
        ``process``: keep each one's open windows and the windows closed before its
        partition's first kept record. A late record is counted (``late(window)``) or,
        when the batch is undoable (``layers.undo``: a dead-letter topic is set),
        dead-lettered with its stream-time writes taken back; a ``timestamp()`` that
        raises goes to ``failed`` (a dead letter, or a raise). Returns the dead letters."""
        kept, opened, seen, floors = self.records, self._opened, self._seen, self._floors
        undo = layers.undo
        out: Outputs = []
        for r in records:
            partition = (r.topic, r.partition)
            if not self._specs:
                self._handles.setdefault(partition, [])
                kept.append(r)
                continue
            try:
                t = event_time(processor, r)
            except Exception as exc:
                out.extend(failed([r], exc))
                continue
            held = self._handles.get(partition) or handles(partition)
            mark = 0 if undo is None else len(undo)
            befores = [h.advance(t, r.offset) for h in held]
            opens = [h.open_starts() for h in held]
            if not all(opens):
                name = next(h.name for h, s in zip(held, opens, strict=True) if not s)
                if undo is not None:  # as the per-record path: no write of it stays
                    layers.revert(undo[mark:])
                    del undo[mark:]
                    out.extend(failed([r], LateRecord(f"record at {t} ms is late for {name!r}")))
                    continue
                for h, starts in zip(held, opens, strict=True):
                    if not starts:
                        late(h.name)
            self._handles[partition] = held
            i = len(kept)
            kept.append(r)
            for h, before, starts in zip(held, befores, opens, strict=True):
                floors.setdefault((partition, h.name), before)
                opened[h.name].extend((i, s) for s in starts)
                seen.update((partition, h.name, s) for s in starts)
        return out

    async def close(
        self, closed: Callable[[bytes, Any, Any], Awaitable[Any]], check: Callable[[Any], Any]
    ) -> Outputs:
        """Hand the windows the batch's stream time closed to ``closed`` and delete them:
        per partition, windows in name then start order, keys in byte order."""
        out: Outputs = []
        for partition in sorted(self._handles):
            for h in self._handles[partition]:  # each advanced by a kept record
                for window, key, value in h.closing(self._floors[(partition, h.name)]):
                    out.extend(check(await closed(key, window, value)))
        return out


async def run_batch(
    seat: Seat,
    state: BatchState,
    step: Callable[[BatchState, Failed], Outputs],
    layers: Layers,
    check: Callable[[Any], Outputs],
    failed: Failed,
    dead_letters: bool,
) -> tuple[Outputs, int]:
    """One ``process_batch`` call with ``state`` (``step`` fills it: ``take``), then the
    closing; returns the outputs and how many records were dead-lettered. With
    ``dead_letters`` the batch's writes are taken back when it fails; a batch whose
    every record was dead-lettered does not call ``process_batch``."""
    undo = layers.start_undo() if dead_letters else None
    try:
        out = step(state, failed)
        dead = len(out)
        if not state.records:
            return out, dead
        processor: Any = seat.processor
        seat.batch = state  # Processor.batch
        try:
            out.extend(check(await processor.process_batch(state.records)))
            out.extend(await state.close(processor.closed, check))
        except (TransactionError, FatalError):
            raise
        except Exception as exc:
            if undo is not None:
                layers.revert(undo)
            return out[:dead] + failed(state.records, exc), dead + len(state.records)
        finally:
            seat.batch = None
        return out, dead
    finally:
        layers.undo = None
