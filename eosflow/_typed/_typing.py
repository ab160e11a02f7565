"""Typed records: what a processor declares of its topics (``Processor.topics``), applied.

``Typing`` is built once per app from the declarations. On the way in, ``decoding``
wraps the processor's bound ``process``: a record of a declared input topic reaches
``process`` -- and ``timestamp``, windows and timers on the way -- with its key and
value decoded (a tombstone stays None); the engine keeps the record as read, so a
record that does not decode is dead-lettered as it was written. On the way out,
``encode`` turns an ``Output``'s key and value into bytes by its topic's declaration
(an object the codec does not take is a ``TypeError`` naming the topic).

A record that does not decode raises ``DecodeError`` (``_errors``) from the wrapper,
before ``process`` runs: the engine's error policy takes it as any processing error --
dead-lettered in the same transaction with the field in its headers, or, without a
dead-letter topic, the app stops with one line naming ``topic[partition]@offset`` and
the field.

Cost: none for an app without declarations (``decoding`` hands ``process`` back), and
for records of undeclared topics one dict lookup; a declared record is one new
``Record`` plus its codecs' work.

Schemas in a registry (``eosflow.Avro``, ``eosflow.JsonSchema``, ``eosflow.Protobuf``:
the ``_schemas`` room): such a declaration is bound to the app's one ``Registry``
(``SchemaRegistrySettings``: the processor's ``schema_registry``, else
``EOSFLOW_SCHEMA_REGISTRY_*``) under its subject; ``prepare()`` registers (or looks up)
the output topics' schemas before the first transaction, and a record naming a schema
id not fetched yet has the wrapper await it once (``NeedsSchema``) before decoding --
the only step that is not synchronous, taken once per schema id. ``close()`` ends the
registry's client.

Tables' topics are not decoded here: a table keeps its rows as written and decodes a
row when it is read, by the table's own serde (``Table(topic, serde=eosflow.Model(M))``)
-- a declaration naming a table's topic is refused, pointing there. A table whose serde
is a registry's schema (``Table(topic, serde=eosflow.Avro(M))``) is bound here like a
declaration, under ``<topic>-value``; ``tables`` are the tables as the stores read
them (a new ``Table`` with the bound codec: the processor's own is left as it is). A
row is read where the registry cannot be awaited (``process``, a lazy result, a timer's
``fire``): a row naming a schema id not fetched yet starts the fetch and raises
``SchemaPending`` there (``_Rows``), a ``TransactionError``: the transaction is
aborted and redone as it was. ``decoding``'s wrapper awaits the fetch before the abort,
so the redo finds the id known: one abort per schema id and process -- the trade for
never re-running half of a ``process`` whose writes were already made.

A store may keep its values in a registry's schema too (``stores = {"last":
eosflow.Avro(M)}``): bound under ``<group>--<store>--changelog-value`` (or the
declaration's ``subject``), its schema registered by ``prepare`` as an output's is, its
values written in it (to the local copy and the changelog, in Confluent's wire format;
the changelog's position records are eosflow's own) and read as a table's rows are
(``stores``: the bound serdes the engine hands the stores).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from msgspec.structs import replace as replace_struct
from pydantic import ValidationError

from .._errors import ConfigError, DecodeError, SchemaPending
from .._records import Output, Record
from .._schemas import NeedsSchema, Registry, SchemaCodec, Schemaful, SchemaRegistrySettings
from .._state import GlobalTable, Serde, Table
from ._codecs import as_bytes, codec_of, loader

__all__ = ["Topic", "Typing"]

Process = Callable[[Record], Awaitable[Any]]
Failed = Callable[[Sequence[Record], Exception], list[Output]]  # the app's error policy
_Codecs = tuple[Serde | None, Serde | None]  # key's, value's (None: bytes)
_UNDECLARED: _Codecs = (None, None)


@dataclass(frozen=True)
class Topic:
    """What a topic's keys and values are, for ``Processor.topics``: ``bytes`` (as read,
    the default), ``str`` (UTF-8), a pydantic model class (its JSON, validated), or a
    ``Serde`` (``eosflow.JSON``, ``eosflow.Model(M)``, anything with ``dumps`` and
    ``loads``). An input topic's records reach ``process`` decoded; an output topic's
    ``Output`` takes the objects and is encoded on its way out.

    ``fold``: an output topic of running values per key (a count, a total) -- of a
    key's outputs in one transaction only the last is written, at the transaction's end
    (as Kafka Streams' record cache folds a KTable's updates between commits). Every
    transaction writes each key's last value; the values before it in the same
    transaction are never written, and outputs without a key are written as they come.
    Off by default: every output is written."""

    value: object = bytes
    key: object = bytes
    fold: bool = False


class Typing:
    """``processor``'s declared topics (name -> ``Topic``), checked in one line each:
    ``inputs`` are the app's input topics, ``tables`` its tables (name -> ``Table`` or
    ``GlobalTable``), ``stores`` its stores (name -> ``Serde`` or a registry's schema,
    as ``_state.declared`` gives them) and ``group`` its group id (a store's subject:
    ``<group>--<store>--changelog-value``); ``registry`` the schema registry's settings
    (None: from ``EOSFLOW_SCHEMA_REGISTRY_*``, read only if a declaration needs one)."""

    def __init__(
        self,
        processor: str,
        topics: Mapping[str, object],
        inputs: Collection[str],
        tables: Mapping[str, Table | GlobalTable] | None = None,
        registry: SchemaRegistrySettings | None = None,
        *,
        stores: Mapping[str, Serde | Schemaful] | None = None,
        group: str = "",
    ) -> None:
        if not isinstance(topics, Mapping):
            raise ConfigError(f"{processor}.topics is {type(topics).__name__}: expected a dict")
        self._codecs: dict[str, _Codecs] = {}
        self._registry: Registry | None = None
        self._bound: list[tuple[SchemaCodec, bool]] = []  # (codec, an output's)
        self.tables: dict[str, Table | GlobalTable] = {}
        for name, table in (tables or {}).items():
            serde = table.serde
            if isinstance(serde, Schemaful):
                where = f"{processor}.tables[{name!r}].serde"
                subject = f"{table.topic}-value"
                serde = _Rows(self._bind(serde, where, subject, registry, output=False))
                table = replace(table, serde=serde)
            self.tables[name] = table
        self.stores: dict[str, Serde] = {}  # as the stores read and write them
        for name, spec in (stores or {}).items():
            if isinstance(spec, Schemaful):  # written here: its schema registered first
                where = f"{processor}.stores[{name!r}]"
                subject = f"{group}--{name}--changelog-value"
                spec = _Rows(self._bind(spec, where, subject, registry, output=True))
            self.stores[name] = spec
        self.folded: set[str] = set()  # output topics whose outputs fold per key (``Topic``)
        self._read_schemas = len(self._bound)  # tables and stores in a registry: read in
        # process (refused with process_batch: ``_state._declare``)
        for name, topic in topics.items():
            where = f"{processor}.topics[{name!r}]"
            if not isinstance(topic, Topic):
                raise ConfigError(
                    f"{where} is {topic!r}: expected eosflow.Topic(value=..., key=...)"
                )
            if any(t.topic == name for t in self.tables.values()):
                raise ConfigError(
                    f"{where}: {name!r} is a table's topic: declare its rows' type on the "
                    f"table, eosflow.Table({name!r}, serde=eosflow.Model(M))"
                )
            output = name not in inputs
            if topic.fold is not False:
                if topic.fold is not True:
                    raise ConfigError(f"{where}.fold is {topic.fold!r}: expected True or False")
                if not output:
                    raise ConfigError(f"{where}: fold is for topics the app writes, not inputs")
                self.folded.add(name)
            codecs = (
                self._codec(topic.key, f"{where}.key", f"{name}-key", registry, output),
                self._codec(topic.value, f"{where}.value", f"{name}-value", registry, output),
            )
            if codecs != (None, None):
                self._codecs[name] = codecs
        self._inputs = {t: c for t, c in self._codecs.items() if t in inputs}

    def _codec(
        self,
        spec: object,
        where: str,
        subject: str,
        settings: SchemaRegistrySettings | None,
        output: bool,
    ) -> Serde | None:
        if not isinstance(spec, Schemaful):
            return codec_of(spec, where)
        return self._bind(spec, where, subject, settings, output)

    def _bind(
        self,
        spec: Schemaful,
        where: str,
        subject: str,
        settings: SchemaRegistrySettings | None,
        output: bool,
    ) -> SchemaCodec:
        if self._registry is None:
            if settings is None:
                settings = SchemaRegistrySettings.from_environment()
            if settings.url is None:
                raise ConfigError(
                    f"{where} is {spec!r}: a schema registry is needed; set "
                    "EOSFLOW_SCHEMA_REGISTRY_URL, or the processor's schema_registry"
                )
            self._registry = Registry(settings)
        codec = spec.bind(self._registry, spec.subject or subject, where)
        self._bound.append((codec, output))
        return codec

    async def prepare(self) -> None:
        """The output topics' schemas registered (or looked up) in the registry: a
        refusal (``SchemaRegistryError``) stops the app before its first transaction."""
        for codec, output in self._bound:
            await codec.prepare(output)

    async def close(self) -> None:
        if self._registry is not None:
            await self._registry.close()

    @property
    def registry(self) -> Registry | None:
        """The schema registry's client, if a declaration needs one."""
        return self._registry

    @property
    def decodes(self) -> bool:
        """Whether any input topic is declared (its records are decoded)."""
        return bool(self._inputs)

    @property
    def encodes(self) -> bool:
        """Whether any topic declares a codec (else outputs take the defaults alone)."""
        return bool(self._codecs)

    def decoding(self, process: Process) -> Process:
        """``process`` taking records of declared input topics decoded; with tables in a
        registry's schema, a row's schema fetched before its ``SchemaPending`` aborts."""
        if self._read_schemas:
            process = _settling(process)
        inputs = self._inputs
        if not inputs:
            return process
        decoders = {topic: _decoder(codecs) for topic, codecs in inputs.items()}

        def typed(record: Record) -> Awaitable[Any]:  # no frame of its own per record
            decode = decoders.get(record.topic)
            if decode is None:
                return process(record)
            try:
                return process(decode(record))
            except NeedsSchema:  # once per schema id: fetch it, then decode
                return _fetched_first(record, inputs[record.topic], process)

        return typed

    async def decode_batch(
        self, records: Sequence[Record], failed: Failed
    ) -> tuple[list[Record], list[Output], Failed]:
        """A batch's records for ``process_batch``: those of declared input topics
        decoded (schemas fetched first where needed), each one that does not decode
        handed to ``failed`` (the error policy: its dead letters, or a raise) on its
        own. Returns the decoded records, those dead letters, and ``failed`` for the
        decoded ones -- the batch failing as a whole is dead-lettered as written."""
        inputs = self._inputs
        if not inputs:
            return list(records), [], failed
        out: list[Record] = []
        dead: list[Output] = []
        raw: dict[int, Record] = {}
        for record in records:
            codecs = inputs.get(record.topic)
            if codecs is None:
                out.append(record)
                continue
            try:
                typed = await _decoded_fetching(record, codecs)
            except DecodeError as exc:
                dead.extend(failed([record], exc))
                continue
            raw[id(typed)] = record
            out.append(typed)

        def failed_as_written(batch: Sequence[Record], exc: Exception) -> list[Output]:
            return failed([raw.get(id(r), r) for r in batch], exc)

        return out, dead, failed_as_written

    def encode(self, o: Output) -> Output:
        """``o`` with its key and value as bytes (None stays None): each side by its
        topic's declaration where it is not bytes already, and what no declaration covers
        as ``as_bytes`` takes it (a ``str``, a pydantic model). A value the codec does not
        take, or another type, is a ``TypeError`` naming the topic. One new ``Output``, no
        frame but the codecs' (the engine calls this for every typed output)."""
        topic, key, value = o.topic, o.key, o.value
        kc, vc = self._codecs.get(topic, _UNDECLARED)
        try:
            if kc is not None and key is not None and type(key) is not bytes:
                key = kc.dumps(key)
            if vc is not None and value is not None and type(value) is not bytes:
                value = vc.dumps(value)
        except Exception as exc:
            raise TypeError(f"Output for {topic}: {exc}") from exc
        if key is not None and type(key) is not bytes:
            key = as_bytes(key, "key", topic)
        if value is not None and type(value) is not bytes:
            value = as_bytes(value, "value", topic)
        return Output(topic, value, key, o.headers, o.partition, o.timestamp)


def _settling(process: Process) -> Process:
    """``process``, a table row's ``SchemaPending`` raised once its fetch is done (a
    failed fetch raised instead: ``SchemaRegistryError`` stops the app)."""

    async def settling(record: Record) -> Any:
        try:
            return await process(record)
        except SchemaPending as pending:
            await pending.pending
            raise

    return settling


class _Rows:
    """A table's or a store's bound codec as the stores read it (a ``Serde``): ``loads``
    never awaits; ``dumps`` writes in the schema registered at ``prepare``.
    A row naming a schema id not fetched yet starts that fetch (once) and raises
    ``SchemaPending``; a fetch that failed is raised by the next read of its id."""

    __slots__ = ("_codec", "_fetching")

    def __init__(self, codec: SchemaCodec) -> None:
        self._codec = codec
        self._fetching: dict[int, asyncio.Future[None]] = {}

    def dumps(self, value: Any, /) -> bytes:
        return self._codec.dumps(value)

    def loads(self, data: bytes, /) -> Any:
        try:
            return self._codec.loads(data)
        except NeedsSchema as need:
            pending = self._fetching.get(need.schema_id)
            if pending is not None and pending.done():
                failed = None if pending.cancelled() else pending.exception()
                if failed is not None:
                    raise failed from None
                pending = None  # cancelled: fetched again
            if pending is None:
                pending = asyncio.ensure_future(need.fetch())
                self._fetching[need.schema_id] = pending
            raise SchemaPending(need.schema_id, pending) from None

    def __repr__(self) -> str:
        return repr(self._codec)


async def _decoded_fetching(record: Record, codecs: _Codecs) -> Record:
    """``record`` decoded, the schemas it names fetched first if need be."""
    for _ in range(3):  # at most one fetch per side
        try:
            return decoded(record, codecs)
        except NeedsSchema as need:
            await need.fetch()
    raise RuntimeError(f"{record.topic}: a schema fetched is still asked for")  # a bug


async def _fetched_first(record: Record, codecs: _Codecs, process: Process) -> Any:
    """``process`` of ``record`` once the schemas it names are fetched."""
    return await process(await _decoded_fetching(record, codecs))


def _decoder(codecs: _Codecs) -> Callable[[Record], Record]:
    """``decoded`` for one topic's codecs: a value alone declared (the common case) in
    one frame around the codec's own call (``loader``: a model's compiled validator)."""
    kc, vc = codecs
    if kc is not None or vc is None:
        return functools.partial(decoded, codecs=codecs)
    loads = loader(vc)

    def value_decoded(record: Record) -> Record:
        value = record.value
        if value is None:  # a tombstone
            return record
        try:
            value = loads(value)
        except NeedsSchema:
            raise
        except Exception as exc:
            raise _error(record, "value", vc, exc) from exc
        return replace_struct(record, value=value)

    return value_decoded


def decoded(record: Record, codecs: _Codecs) -> Record:
    """``record`` with its key and value decoded, or the ``DecodeError`` saying which
    side and field did not."""
    kc, vc = codecs
    key, value = record.key, record.value
    if kc is not None and key is not None:
        try:
            key = kc.loads(key)
        except NeedsSchema:
            raise
        except Exception as exc:
            raise _error(record, "key", kc, exc) from exc
    if vc is not None and value is not None:
        try:
            value = vc.loads(value)
        except NeedsSchema:
            raise
        except Exception as exc:
            raise _error(record, "value", vc, exc) from exc
    return Record(
        record.topic, record.partition, record.offset, key, value, record.headers, record.timestamp
    )


def _error(record: Record, part: str, codec: Serde, exc: Exception) -> DecodeError:
    """The one-line error of ``part`` not decoding: the field and the first problem (a
    model's validation error names where; others say what failed)."""
    expected = getattr(getattr(codec, "model", None), "__name__", None) or repr(codec)
    field, reason = part, f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ValidationError):
        problems = exc.errors(include_url=False, include_input=False)
        first = problems[0] if problems else None
        if first is not None:
            field = ".".join((part, *_locations(first["loc"])))
            reason = first["msg"] + (
                f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            )
    reason = " ".join(reason.split())  # one line, whatever the codec's message held
    return DecodeError(record.topic, record.partition, record.offset, field, expected, reason)


def _locations(loc: Iterable[int | str]) -> list[str]:
    return [str(step) for step in loc]
