"""``Work``: what the engine's per-record loop (``Engine._process``) fills and the
transaction takes -- a chunk of the open transaction, or work done ahead of the next."""

from __future__ import annotations

from dataclasses import dataclass, field

from .._errors import TransactionError
from .._records import Output, Record

__all__ = ["Work"]


@dataclass(slots=True)
class Work:
    """Records processed into outputs that are not sent yet: a chunk of the open
    transaction, or work done ahead of the next one (``Engine._work_ahead``)."""

    epoch: int = 0  # work ahead: the session's epoch when it started
    records: list[Record] = field(default_factory=list)  # processed
    outputs: list[Output] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # next, per partition
    pending: list[Record] = field(default_factory=list)  # work ahead: polled, not processed
    dead_lettered: int = 0  # records among ``records`` whose outputs are dead letters
    undecodable: int = 0  # of those, records that did not decode (``DecodeError``)
    failed: TransactionError | None = None  # work ahead: a retry asked, or a poll failed
    size: int = 0  # key + value bytes of ``records`` (counted under max_bytes_per_txn only)
