from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._records import Output, Record

def murmur2(data: bytes) -> int: ...
def bind_batch(batch_type: type) -> None: ...
def fill(
    outputs: list[Output],
    start: int,
    open_: dict[tuple[str, int], Any],
    lists: dict[str, list[int]],
    max_bytes: int,
) -> int: ...
def byte_count(records: Sequence[Record]) -> int: ...
def decode_batch(
    raw: bytes, pos: int, topic: str, partition: int, fetch_offset: int
) -> list[Record]: ...
def bind_store(
    store_type: type,
    layers_type: type,
    writes_type: type,
    missing: object,
    reserved: bytes,
    store_key: Callable[[Any], bytes],
    json: object,
    python: Mapping[str, Callable[..., Any]],
) -> dict[str, Callable[..., Any]] | None: ...
def bind_seat(
    seat_type: type, current: object, python: Mapping[str, Callable[..., Any]]
) -> dict[str, Callable[..., Any]] | None: ...
def bind_table(table_type: type, python_get: Callable[..., Any]) -> Callable[..., Any] | None: ...
