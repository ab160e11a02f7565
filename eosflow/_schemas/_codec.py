"""What the schema-registry declarations share: ``Schemaful`` (a declaration, bound to a
registry and a subject when the app starts) and ``SchemaCodec`` (the bound codec).

A bound codec is a ``Serde`` (``loads``/``dumps``) with an async step before each:

- ``prepare(output)``: for a topic the app writes, the declared schema is registered
  under its subject (``auto_register``) or looked up, and its id kept; every ``dumps``
  writes that id's header before the body. Nothing to do for an input alone.
- ``loads`` reads the schema id of the record's header; a writer schema fetched before
  decodes at once. An id not seen yet raises ``NeedsSchema``, whose ``fetch()`` the
  typed-records wrapper awaits before decoding again: the registry is asked once per id
  (``Registry.schema``), never per record, and never from inside a sync call.

Subjects follow Confluent's default TopicNameStrategy, ``<topic>-key`` and
``<topic>-value``, unless the declaration names its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from pydantic import BaseModel

from .._errors import ConfigError
from ._client import Registry
from ._wire import frame, schema_id_of

Reader = Callable[[bytes], Any]


class NeedsSchema(Exception):
    """Raised by ``loads`` for a schema id not fetched yet: await ``fetch()``, then
    decode again."""

    def __init__(self, fetch: Callable[[], Awaitable[None]], schema_id: int) -> None:
        super().__init__(f"writer schema {schema_id} is to be fetched first")
        self.fetch, self.schema_id = fetch, schema_id


class UnknownSchemaId(ValueError):
    """The registry does not know the id a record names: that record does not decode."""


class Schemaful:
    """A declaration of a topic side's schema: ``model`` (a pydantic model class, or
    None: plain values; ``Protobuf``'s is a generated message class, checked by its own
    ``__init__``) and ``schema`` (the schema; derived from the model when not given).
    ``subject`` overrides ``<topic>-key``/``<topic>-value``."""

    kind: ClassVar[str]  # the registry's schemaType: AVRO, JSON, PROTOBUF
    model: type[Any] | None

    def __init__(
        self,
        model: type[BaseModel] | None = None,
        *,
        schema: str | dict[str, Any] | None = None,
        subject: str | None = None,
    ) -> None:
        name = type(self).__name__
        if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigError(f"eosflow.{name}({model!r}): expected a pydantic model class")
        if model is None and schema is None:
            raise ConfigError(f"eosflow.{name}(): give a pydantic model, a schema, or both")
        self.model = model
        self.schema = schema
        self.subject = subject

    def bind(self, registry: Registry, subject: str, where: str) -> SchemaCodec:
        """The codec of this declaration under ``subject`` (``where`` names the
        declaration in a ``ConfigError`` about its schema)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        inner = self.model.__name__ if self.model is not None else "schema"
        return f"eosflow.{type(self).__name__}({inner})"


class SchemaCodec:
    """A declaration bound to a registry and a subject (see the module doc). Subclasses
    give ``text`` (the schema as registered), ``encode`` (a value to a body) and
    ``reader`` (a decoder of bodies written with a writer schema)."""

    def __init__(self, declared: Schemaful, registry: Registry, subject: str, text: str) -> None:
        self.model = declared.model
        self.declared = declared
        self.registry = registry
        self.subject = subject
        self.text = text
        self._head: bytes | None = None
        self._readers: dict[int, Reader | None] = {}

    async def prepare(self, output: bool) -> None:
        if not output:
            return
        reg = self.registry
        kind = self.declared.kind
        if reg.auto_register:
            schema_id = await reg.register(self.subject, kind, self.text)
        else:
            schema_id = await reg.lookup(self.subject, kind, self.text)
        self._head = frame(schema_id)
        self._readers.setdefault(schema_id, self.reader(kind, self.text))

    def loads(self, data: bytes, /) -> Any:
        schema_id = schema_id_of(data)
        try:
            read = self._readers[schema_id]
        except KeyError:
            raise NeedsSchema(lambda: self._fetch(schema_id), schema_id) from None
        if read is None:
            raise UnknownSchemaId(f"schema id {schema_id} is unknown to {self.registry.url}")
        return read(data)

    def dumps(self, value: Any, /) -> bytes:
        if self._head is None:
            raise RuntimeError(f"{self!r} is not an output's: it has no registered schema")
        if self.model is not None and not isinstance(value, self.model):
            raise TypeError(f"{type(value).__name__} given where {self.model.__name__} is taken")
        return self._head + self.encode(value)

    async def _fetch(self, schema_id: int) -> None:
        found = await self.registry.schema(schema_id)
        if found is None:
            self._readers[schema_id] = None
            return
        kind, text = found
        if kind != self.declared.kind:
            self._readers[schema_id] = _refuse(
                f"schema id {schema_id} is {kind}, where {self.declared.kind} is declared"
            )
            return
        try:
            self._readers[schema_id] = self.reader(kind, text)
        except Exception as exc:  # the writer's schema does not parse, or cannot be read
            self._readers[schema_id] = _refuse(f"schema id {schema_id}: {exc}")

    def encode(self, value: Any) -> bytes:
        raise NotImplementedError

    def reader(self, kind: str, text: str) -> Reader:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.declared!r} under {self.subject!r}"


def _refuse(reason: str) -> Reader:
    def refuse(data: bytes) -> Any:
        raise UnknownSchemaId(reason)

    return refuse
