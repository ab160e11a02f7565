from collections.abc import Sequence
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
