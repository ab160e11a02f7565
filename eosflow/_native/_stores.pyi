from collections.abc import Callable, Mapping
from typing import Any

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
def bind_window(
    window_type: type, python: Mapping[str, Callable[..., Any]]
) -> dict[str, Callable[..., Any]] | None: ...
def bind_reader(
    reader_type: type, cache_type: type, missing: object, python_get: Callable[..., Any]
) -> Callable[..., Any] | None: ...
