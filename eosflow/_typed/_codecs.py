"""What a topic's keys or values are, as a codec: bytes in, an object out, and back.

A declaration (``Topic(key=..., value=...)``) names each side by what a processor
wants to hold -- ``bytes`` (as read, the default), ``str`` (UTF-8), a pydantic model
class (its JSON, validated: ``Model``), or any ``Serde`` (an object with ``dumps`` and
``loads``, as stores take: ``eosflow.JSON``) -- and ``codec_of`` turns it into one
object with ``loads`` and ``dumps``. A tombstone (a None key or value) is never handed
to a codec: it stays None either way.

JSON through pydantic's own compiled validator and serializer (``model_validate_json``,
``__pydantic_serializer__.to_json``): the fastest way to a validated model from bytes
that pydantic offers (no ``json.loads`` into dicts first), and the encoding the
model's own ``model_dump_json`` gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from .._errors import ConfigError
from .._state import Serde

M = TypeVar("M", bound=BaseModel)

__all__ = ["Model", "as_bytes", "codec_of", "declared_model", "loader", "model_json"]


class Model(Generic[M]):
    """A ``Serde`` of one pydantic model: ``loads`` validates JSON bytes into ``model``
    (a ``pydantic.ValidationError`` when they do not fit), ``dumps`` writes its JSON.
    Usable wherever a ``Serde`` is: a topic's key or value, a store's values."""

    __slots__ = ("_validate", "model")

    def __init__(self, model: type[M]) -> None:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigError(f"eosflow.Model({model!r}): expected a pydantic model class")
        self.model = model
        self._validate = model.__pydantic_validator__.validate_json  # no wrapper frame

    def loads(self, data: bytes, /) -> M:
        return self._validate(data)  # type: ignore[no-any-return]

    def dumps(self, value: Any, /) -> bytes:
        if not isinstance(value, self.model):
            raise TypeError(f"{type(value).__name__} given where {self.model.__name__} is taken")
        return value.__pydantic_serializer__.to_json(value)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"eosflow.Model({self.model.__name__})"


def model_json(value: BaseModel) -> bytes:
    """``value``'s JSON, as its ``model_dump_json`` gives it, as bytes."""
    return value.__pydantic_serializer__.to_json(value)


def loader(codec: Serde) -> Callable[[bytes], Any]:
    """``codec.loads`` without its frame where there is one to spare: a ``Model``'s
    compiled validator itself."""
    return codec._validate if type(codec) is Model else codec.loads  # (a subclass may override)


def as_bytes(v: object, field: str, topic: str) -> bytes | None:
    """An output's ``field`` (key or value) of ``topic`` with no declaration for it, as
    bytes: a ``str`` as UTF-8, a pydantic model as its JSON; anything else is a
    ``TypeError`` naming the field."""
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, BaseModel):
        return model_json(v)
    raise TypeError(
        f"Output.{field} for {topic} is {type(v).__name__}; expected bytes, str, a "
        "pydantic model or None (or what the topic declares: Processor.topics)"
    )


class _Utf8:
    """``str`` keys or values, as UTF-8 (undecodable bytes are an error, not replaced)."""

    def loads(self, data: bytes, /) -> str:
        return data.decode()

    def dumps(self, value: Any, /) -> bytes:
        if not isinstance(value, str):
            raise TypeError(f"{type(value).__name__} given where str is taken")
        return value.encode()

    def __repr__(self) -> str:
        return "str"


_UTF8 = _Utf8()


def codec_of(spec: object, where: str) -> Serde | None:
    """The codec ``spec`` names (None: bytes, nothing to do), or a one-line
    ``ConfigError`` naming ``where`` (e.g. ``Clicks.topics['clicks'].value``)."""
    if spec is None or spec is bytes:
        return None
    if spec is str:
        return _UTF8
    if isinstance(spec, type) and issubclass(spec, BaseModel):
        return Model(spec)
    if callable(getattr(spec, "loads", None)) and callable(getattr(spec, "dumps", None)):
        return spec  # type: ignore[return-value]  # a Serde by its two methods
    raise ConfigError(
        f"{where} is {spec!r}: expected bytes, str, a pydantic model class or a Serde "
        "(an object with dumps and loads, such as eosflow.JSON)"
    )


def declared_model(spec: object) -> type[BaseModel] | None:
    """The pydantic model a declaration's side decodes to: a model class itself, or the
    ``model`` of ``eosflow.Model``, ``eosflow.Avro`` and ``eosflow.JsonSchema``; None for
    bytes, ``str``, a model-less schema and other ``Serde``s."""
    if isinstance(spec, type) and issubclass(spec, BaseModel):
        return spec
    model = getattr(spec, "model", None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model
    return None
