"""What a processor sees of its state: ``Store`` (one store of one input partition),
``Serde`` and the two serializers eosflow ships (``BYTES``, ``JSON``).

A store's value is read through three layers, newest first: the writes of the work in
hand (the open transaction, or work done ahead of the next one), the writes of the
transaction that is committing, and the local copy on disk (what committed
transactions left). Writes go to the first layer only; they reach the changelog and the
disk when their transaction commits (``eosflow._state.Stores``). Values are serialized
when put, so a value read back is a copy: change it and ``put`` it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload, runtime_checkable

import pydantic_core

from .._native import bind_store, named_as
from ._layers import MISSING, Layers
from ._sorted import Writes

if TYPE_CHECKING:
    from ._local import LocalPartition

V = TypeVar("V")

RESERVED_KEY = b"\x00eosflow.position"
"""The changelog key of the record that closes each transaction's writes to a store
partition (its value: the input offset the store then reflects). No store key may be it."""


@runtime_checkable
class Serde(Protocol):
    """Turns a store's values into bytes and back. Any object with these two methods
    will do (``pickle`` is one). ``dumps`` must be deterministic enough that a value put
    twice reads back equal."""

    def dumps(self, value: Any, /) -> bytes: ...

    def loads(self, data: bytes, /) -> Any: ...


class _Bytes:
    """Values are bytes, stored as they are; a ``str`` is encoded as UTF-8."""

    def dumps(self, value: Any) -> bytes:
        if type(value) is bytes:
            return value
        if isinstance(value, str):
            return value.encode()
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        raise TypeError(
            f"a store with BYTES values takes bytes or str, not {type(value).__name__} "
            "(declare the store with eosflow.JSON or another Serde)"
        )

    def loads(self, data: bytes) -> bytes:
        return data

    def __repr__(self) -> str:
        return "eosflow.BYTES"


class _Json:
    """Values are JSON (compact, UTF-8; NaN and the infinities as ``NaN``/``Infinity``,
    as Python's ``json`` writes them), through pydantic-core's Rust encoder and parser:
    on an ~110 B object 0.6 us each way, where the standard library's ``json`` took
    2.2 us to read and 2.9 us to write (``benchmarks/README.md``, typed). Integers, the
    commonest value of a count, take a faster path: their JSON is their decimal digits
    (``int`` reads those back, and any other JSON falls back to the parser). Besides
    JSON's own types, a datetime, date, UUID or UTF-8 ``bytes`` is written as a string
    (and read back as one); any other object is a ``TypeError`` naming its type."""

    _encode = staticmethod(pydantic_core.to_json)
    _decode = staticmethod(pydantic_core.from_json)

    def dumps(self, value: Any) -> bytes:
        if type(value) is int:
            return b"%d" % value
        try:
            return self._encode(value)
        except pydantic_core.PydanticSerializationError as exc:
            raise TypeError(f"eosflow.JSON cannot write it: {exc}") from None

    def loads(self, data: bytes) -> Any:
        if data[:1] in _DIGITS:
            try:
                return int(data)
            except ValueError:
                pass
        return self._decode(data)

    def __repr__(self) -> str:
        return "eosflow.JSON"


_DIGITS = frozenset(bytes([c]) for c in b"-0123456789")


BYTES: Serde = _Bytes()
JSON: Serde = _Json()


def store_key(key: bytes | str) -> bytes:
    """A store key as bytes (``str`` as UTF-8); the reserved key is refused."""
    if type(key) is not bytes:
        if isinstance(key, str):
            key = key.encode()
        elif isinstance(key, (bytearray, memoryview)):
            key = bytes(key)
        else:
            raise TypeError(f"store keys are bytes or str, not {type(key).__name__}")
    if key == RESERVED_KEY:
        raise ValueError(f"the store key {RESERVED_KEY!r} is reserved by eosflow")
    return key


class Store(Generic[V]):
    """One named store of one input partition, as ``Processor.state(name)`` gives it.

    Keys are bytes (``str`` is encoded as UTF-8) and kept in byte order; values go
    through the store's ``Serde`` (``BYTES`` unless the processor declared another).
    Reads see the open transaction's own writes. Writes become durable when the
    transaction commits, atomically with its outputs and consumed offsets; if it
    aborts they are gone and its records are processed again."""

    __slots__ = ("_layers", "_local", "_read", "_serde", "_slot", "name", "partition")

    def __init__(
        self,
        name: str,
        partition: tuple[str, int],
        serde: Serde,
        layers: Layers,
        local: LocalPartition,
    ) -> None:
        self.name, self.partition = name, partition
        self._serde, self._layers, self._local = serde, layers, local
        self._slot = (name, partition)
        self._read = local.reader(name).get  # the local copy's reads, through the read cache

    def __repr__(self) -> str:
        topic, p = self.partition
        return f"<eosflow.Store {self.name!r} of {topic}[{p}]>"

    @property
    def serde(self) -> Serde:
        return self._serde

    @property
    def layers(self) -> Layers:
        """The writes not yet on disk this store reads through (``_layers``)."""
        return self._layers

    @property
    def read_local(self) -> Callable[[bytes], bytes | None]:
        """The local copy's point read, through the read cache: what ``raw`` reads once
        the layers do not hold the key (fixed for the store's life)."""
        return self._read

    def raw(self, key: bytes) -> bytes | None:
        """The serialized value of ``key`` (bytes, not checked), for eosflow's own
        structures over a store of bytes (windows, timers): one call on their hot path."""
        layers, slot = self._layers, self._slot
        writes = layers.open.get(slot)
        if writes is not None:
            value = writes.get(key, MISSING)
            if value is not MISSING:
                return value  # type: ignore[return-value]
        sealed = layers.sealed
        if sealed:  # (empty but while a transaction commits)
            writes = sealed.get(slot)
            if writes is not None:
                value = writes.get(key, MISSING)
                if value is not MISSING:
                    return value  # type: ignore[return-value]
        return self._read(key)

    @overload
    def get(self, key: bytes | str) -> V | None: ...

    @overload
    def get(self, key: bytes | str, default: V) -> V: ...

    def get(self, key: bytes | str, default: V | None = None) -> V | None:
        """The value of ``key``, or ``default`` when it has none."""
        raw = self.raw(key if type(key) is bytes and key != RESERVED_KEY else store_key(key))
        return default if raw is None else self._serde.loads(raw)  # type: ignore[no-any-return]

    def __contains__(self, key: bytes | str) -> bool:
        return self.raw(store_key(key)) is not None

    def put(self, key: bytes | str, value: V) -> None:
        """Set ``key`` to ``value`` in the open transaction."""
        data = self._serde.dumps(value)
        self._set(key if type(key) is bytes and key != RESERVED_KEY else store_key(key), data)

    def delete(self, key: bytes | str) -> None:
        """Remove ``key`` in the open transaction (a tombstone in the changelog)."""
        self._set(store_key(key), None)

    def _set(self, key: bytes, data: bytes | None) -> None:
        """Set ``key`` to serialized ``data`` (None: delete) in the open layer."""
        layers = self._layers
        writes = layers.open.get(self._slot)
        if writes is None:
            writes = layers.open[self._slot] = Writes()
        if layers.undo is not None:  # while a record is processed: undone if it fails
            layers.undo.append((writes, key, writes.get(key, MISSING)))
        if writes.index is not None and key not in writes:  # ranges were read: kept sorted
            writes.index.add(key)
        writes[key] = data

    put_raw = _set
    """Set ``key`` to serialized ``data`` (``raw``'s counterpart: not checked)."""

    def range(
        self, start: bytes | str | None = None, end: bytes | str | None = None
    ) -> Iterator[tuple[bytes, V]]:
        """(key, value) for every key in ``[start, end)`` in byte order (open ends when
        None), the open transaction's writes included. Do not write to the store while
        iterating; collect first."""
        lo = None if start is None else store_key(start)
        hi = None if end is None else store_key(end)
        overlay: dict[bytes, bytes | None] = {}
        for layer in (self._layers.sealed, self._layers.open):  # newer wins
            writes = layer.get(self._slot)
            if writes:
                overlay.update(writes.between(lo, hi))
        pending = sorted(overlay.items())
        loads = self._serde.loads
        i = 0
        for key, raw in self._local.items(self.name, lo, hi):
            while i < len(pending) and pending[i][0] < key:
                k, v = pending[i]
                i += 1
                if v is not None:
                    yield k, loads(v)
            if i < len(pending) and pending[i][0] == key:
                k, v = pending[i]
                i += 1
                if v is not None:
                    yield k, loads(v)
                continue
            yield key, loads(raw)
        for k, v in pending[i:]:
            if v is not None:
                yield k, loads(v)


PYTHON_PATH: dict[str, Callable[..., Any]] = {
    name: Store.__dict__[name] for name in ("raw", "get", "put", "_set")
}
"""``Store``'s point reads and writes in Python: what runs without the compiled
extension, and what the compiled ones are held to (``tests/unit/test_native_store.py``)."""


def _compile() -> None:
    """Put the compiled point reads and writes (``eosflow._native``) in place of the
    methods above, where the extension is built: the same steps with the slots read at
    their offsets and JSON integers in C (a count's get + put, path alone: 59% fewer
    instructions, ``benchmarks/README.md``). A subclass of ``Store``, or layers of
    another class than ``Layers``, takes the Python methods."""
    compiled = bind_store(
        Store, Layers, Writes, MISSING, RESERVED_KEY, store_key, JSON, PYTHON_PATH
    )
    if compiled is not None:
        for name, function in compiled.items():
            setattr(Store, name, named_as(function, PYTHON_PATH[name]))
        setattr(Store, "put_raw", compiled["_set"])  # noqa: B010 (not a method to mypy)


_compile()
