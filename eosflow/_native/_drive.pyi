from collections.abc import Awaitable, Callable
from typing import Any

from .._records import Output, Record

def drive(
    records: list[Record],
    start: int,
    process: Callable[[Record], Awaitable[object]],
    route: Callable[[object], object] | None,
    enter: Callable[[tuple[str, int]], Callable[[Record], Awaitable[object]] | None] | None,
    outputs: list[Output],
    deadline: float,
    ending: Any,
    yield_at: float,
) -> tuple[int, int, Any]: ...
def mark_runs(records: list[Record], done: int, offsets: dict[tuple[str, int], int]) -> None: ...
