"""Global tables: every partition of a topic, in every instance, for lookups by any key.

``tables = {"products": eosflow.GlobalTable("products")}`` and
``self.table("products").get(product_id)`` in ``process``: a key that is not the
record's own (orders keyed by customer, looking up the product they name). Unlike a
``Table`` it needs no co-partitioning, and unlike it, it is not synchronised with the
stream -- as Kafka Streams' ``GlobalKTable`` is not:

- **At start**, before the first record is processed, each global table is read from
  its local copy's checkpoint (per partition) to the topic's end (its last stable
  offsets then, read_committed), so a record sees every row written before the app
  started.
- **While running**, one task reads on and applies rows as they come: a record sees the
  rows applied so far. Which rows those are depends on timing: a row written just
  before a record may not be in yet. A join whose result must depend on the input
  alone needs a co-partitioned ``Table``.
- The table is read by the group's instances only; nothing of it is committed in the
  transactions. The local copy (one RocksDB database per table, the checkpoints the next
  offset per partition, written with the rows in one batch) survives a restart: the
  next start reads only what came since. A checkpoint past the topic's end (the topic
  recreated) wipes the copy.

A failure to read that outlasts ``retry_timeout_s`` stops the app (``FatalError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from aiokafka import AIOKafkaConsumer, TopicPartition

from .. import _aiokafka as ak
from .._errors import ConfigError, EosflowError, FatalError, TransientError
from .._records import ALL_PARTITIONS, Partition
from .._schemas import Schemaful
from ._local import Checkpoint, Env, LocalPartition
from ._settings import StateSettings
from ._store import JSON, RESERVED_KEY, Serde, store_key

log = logging.getLogger("eosflow.state")

V = TypeVar("V")
_REPORT_EVERY_S = 5.0
_POLL_MS = 100
_MAX_RECORDS = 20_000


@dataclass(frozen=True, slots=True)
class GlobalTable:
    """A topic read whole by every instance, as the latest value per key
    (``Processor.tables``): looked up by any key, not synchronised with the stream.
    ``serde``: how its values are read (JSON by default; a registry's schema as for
    ``Table``)."""

    topic: str
    serde: Serde | Schemaful = JSON

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ConfigError(
                f"eosflow.GlobalTable: topic must be a topic name, not {self.topic!r}"
            )
        check_serde(f"eosflow.GlobalTable({self.topic!r})", self.serde)


def check_serde(where: str, serde: object) -> None:
    """A table's ``serde`` is a ``Serde`` or a registry's schema: a one-line
    ``ConfigError`` naming ``where`` otherwise."""
    if not isinstance(serde, (Serde, Schemaful)):
        raise ConfigError(
            f"{where}: serde must have dumps and loads (e.g. eosflow.JSON), or be a "
            f"registry's schema (eosflow.Avro(M)), not {serde!r}"
        )


def bound_serde(serde: Serde | Schemaful) -> Serde:
    """A table's serde as its stores read it: a registry's schema must have been bound
    to the app's registry (``_typed.Typing``) before the stores open."""
    if isinstance(serde, Schemaful):
        raise RuntimeError(f"{serde!r}: a table's schema was not bound to a registry")  # a bug
    return serde


class GlobalStore(Generic[V]):
    """A global table as ``Processor.table(name)`` gives it: read only, every key."""

    __slots__ = ("_local", "_serde", "name")

    def __init__(self, name: str, local: LocalPartition, serde: Serde) -> None:
        self.name, self._local, self._serde = name, local, serde

    def __repr__(self) -> str:
        return f"<eosflow.GlobalStore {self.name!r}>"

    @overload
    def get(self, key: bytes | str) -> V | None: ...

    @overload
    def get(self, key: bytes | str, default: V) -> V: ...

    def get(self, key: bytes | str, default: V | None = None) -> V | None:
        """The table's latest applied value of ``key``, or ``default``."""
        raw = self._local.get(self.name, store_key(key))
        return default if raw is None else self._serde.loads(raw)  # type: ignore[no-any-return]

    def __contains__(self, key: bytes | str) -> bool:
        return self._local.get(self.name, store_key(key)) is not None

    def range(
        self, start: bytes | str | None = None, end: bytes | str | None = None
    ) -> Iterator[tuple[bytes, V]]:
        """(key, value) for every key in ``[start, end)``, in byte order."""
        lo = None if start is None else store_key(start)
        hi = None if end is None else store_key(end)
        for key, raw in self._local.items(self.name, lo, hi):
            yield key, self._serde.loads(raw)


def _behind(consumer: AIOKafkaConsumer, tp: TopicPartition, end: int) -> bool:
    """Whether ``tp`` is still short of ``end`` (or has no position: a reset pending)."""
    position = ak.position_now(consumer, tp)
    return position is None or position < end


def _mark(name: str, partition: int) -> str:
    """The checkpoint's name of one partition of global table ``name``."""
    return f"{name}@{partition}"


class GlobalTables:
    """The processor's global tables: ``start`` reads each to its end, then a task keeps
    them current until ``stop``; ``store(name)`` is what ``process`` reads."""

    def __init__(
        self,
        config: StateSettings,
        specs: Mapping[str, GlobalTable],
        root: Path,
        env: Callable[[], Env],
        on_failed: Callable[[Exception], None],
    ) -> None:
        self.config, self.specs = config, dict(specs)
        self._root, self._env, self._on_failed = root, env, on_failed
        self._of = {spec.topic: name for name, spec in self.specs.items()}
        self._local: dict[str, LocalPartition] = {}
        self._stores: dict[str, GlobalStore[Any]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    def store(self, name: str) -> GlobalStore[Any] | None:
        return self._stores.get(name)

    def copies(self) -> dict[Partition, LocalPartition]:
        """Each table's local copy once read, keyed by its topic and partition -1 (every
        partition of it, in one copy): what the console sizes beside the stores'."""
        return {(self.specs[n].topic, ALL_PARTITIONS): c for n, c in self._local.items()}

    async def start(self, counts: Mapping[str, int]) -> None:
        """Open each table's local copy and read every partition to the topic's end now
        (``counts``: topic -> partitions); then keep reading in a task of its own."""
        if not self.specs:
            return
        cfg = self.config
        for name, spec in self.specs.items():
            local = LocalPartition(self._root / "global", (spec.topic, 0), [name], self._env())
            self._local[name] = local
            self._stores[name] = GlobalStore(name, local, bound_serde(spec.serde))
        consumer = self._consumer = await cfg.reader("global", _POLL_MS)
        tps = [
            TopicPartition(s.topic, p) for s in self.specs.values() for p in range(counts[s.topic])
        ]
        with ak.mapped("reading the global tables (positioning)", "READ"):
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)  # read_committed: the last stable offsets
            for name, spec in self.specs.items():
                local, parts = self._local[name], range(counts[spec.topic])
                at = {p: local.checkpoint(_mark(name, p)).offset for p in parts}
                if any(at[p] > ends[TopicPartition(spec.topic, p)] for p in parts):
                    log.warning(
                        "global table %r is past %s's end (recreated?): rebuilt", name, spec.topic
                    )
                    local.wipe(name)
                    local.apply({}, {_mark(name, p): Checkpoint(0, -1, 0) for p in parts})
                    at = dict.fromkeys(parts, 0)
                for p in parts:
                    consumer.seek(TopicPartition(spec.topic, p), at[p])
        await self._catch_up(consumer, ends)
        self._task = asyncio.create_task(self._follow(consumer), name="eosflow-global-tables")

    async def _catch_up(
        self, consumer: AIOKafkaConsumer, ends: Mapping[TopicPartition, int]
    ) -> None:
        """Read until every partition's position reaches its end of ``ends``."""
        started = reported = time.monotonic()
        applied = 0
        failing: float | None = None
        while True:
            try:
                with ak.mapped("reading the global tables", "READ"):
                    batch = await consumer.getmany(timeout_ms=_POLL_MS, max_records=_MAX_RECORDS)
                    applied += self._apply(batch)
                    behind = [tp for tp, end in ends.items() if _behind(consumer, tp, end)]
                failing = None
            except TransientError as exc:
                failing = failing or time.monotonic()
                if time.monotonic() - failing > self.config.retry_timeout_s:
                    raise FatalError(f"reading the global tables: {exc}") from exc
                await asyncio.sleep(self.config.retry_backoff_s)
                continue
            now = time.monotonic()
            if not behind:
                log.info(
                    "global tables %s read: %d records in %.1f s",
                    sorted(self.specs),
                    applied,
                    now - started,
                )
                return
            if now - reported >= _REPORT_EVERY_S:
                reported = now
                log.info("reading the global tables: %d records applied so far", applied)

    def _apply(self, batch: Mapping[TopicPartition, list[Any]]) -> int:
        """A fetch's records into the local copies, each partition's with its checkpoint."""
        applied = 0
        for tp, msgs in batch.items():
            if not msgs:
                continue
            name = self._of[tp.topic]
            changes: dict[bytes, bytes | None] = {}
            for m in msgs:
                if m.key is not None and m.key != RESERVED_KEY:
                    changes[m.key] = m.value
            nxt = msgs[-1].offset + 1
            self._local[name].apply(
                {name: changes}, {_mark(name, tp.partition): Checkpoint(nxt, -1, nxt)}
            )
            applied += len(msgs)
        return applied

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        """Apply rows as they come, until stopped; a failure that outlasts
        ``retry_timeout_s`` stops the app."""
        failing: float | None = None
        while True:
            try:
                with ak.mapped("reading the global tables", "READ"):
                    batch = await consumer.getmany(timeout_ms=1000, max_records=_MAX_RECORDS)
                self._apply(batch)
                failing = None
            except asyncio.CancelledError:
                raise
            except TransientError as exc:
                failing = failing or time.monotonic()
                if time.monotonic() - failing > self.config.retry_timeout_s:
                    self._on_failed(FatalError(f"reading the global tables: {exc}"))
                    return
                await asyncio.sleep(self.config.retry_backoff_s)
            except EosflowError as exc:
                self._on_failed(exc)
                return
            except Exception as exc:  # the boundary: nothing leaves the task unseen
                self._on_failed(ak.map_error(exc, "reading the global tables"))
                return

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await ak.close_consumer(consumer, timeout_s=10.0)
        for local in self._local.values():
            local.close()
        self._local.clear()
        self._stores.clear()
