"""``ReadCache``: the values the local copies gave lately, kept in memory.

A store's point read (``Store.get``, a window's value, a table's row) goes to the open
transaction's writes, then the sealed transaction's, then the local copy: RocksDB
through rocksdict, 1.1 to 1.6 us a read measured here (33,000 keys of 100 B, in the
memtable or flushed). That read is the largest single cost of a windowed count -- every
record reads its key-window's value, written by an earlier transaction and so no longer
in the layers -- and of a join, where every order reads its customer's row. Kafka
Streams keeps such values in memory across commits (its record cache, 10 MiB by
default); this is eosflow's.

- **Filled by reads.** A value read from a local copy, or its absence, is kept.
- **Kept true by writes.** ``LocalPartition.apply`` -- every commit, every restore
  batch, the only way anything is written to a local copy -- sets the kept entries of
  the keys it writes (it adds none: a key written but never read costs nothing here).
  ``wipe`` and ``close`` give the store a new tag, so nothing kept of what they dropped
  is read again.
- **Bounded** at ``budget_bytes`` for an app's stores (``Env``, one per ``Stores``: 8
  MiB by default), in two generations of half of it each, an entry counted as its key,
  its value and ``ENTRY_OVERHEAD`` bytes (Python's objects and the dict slot). A value
  found in the older generation moves to the newer; a full newer generation replaces
  the older; a write that would grow the newer past its half drops its entry instead.
  So recently read keys stay, and a key space larger than the budget pays one dict
  lookup more than RocksDB alone.

Trade-off: up to ``budget_bytes`` of memory for reads that skip RocksDB; the bound
holds whatever the number of partitions. The cache never decides what a read returns:
a miss reads the local copy as before.
"""

from __future__ import annotations

import itertools

ENTRY_OVERHEAD = 150  # bytes: the slot tuple, the bytes objects' headers, the dict slot
MISSING = object()  # ``get``: not kept (None is kept: the key has no value)

Slot = tuple[int, bytes]  # (a store's tag, the key)


class ReadCache:
    __slots__ = ("_half", "_new", "_new_bytes", "_old", "_tags")

    def __init__(self, budget_bytes: int) -> None:
        self._half = max(budget_bytes // 2, 0)
        self._new: dict[Slot, bytes | None] = {}
        self._old: dict[Slot, bytes | None] = {}
        self._new_bytes = 0
        self._tags = itertools.count()

    def tag(self) -> int:
        """A tag for a store's slots no other store (or earlier life of it) has."""
        return next(self._tags)

    def get(self, slot: Slot) -> bytes | object | None:
        """The value kept for ``slot`` (None: it has none), or ``MISSING``."""
        value = self._new.get(slot, MISSING)
        if value is not MISSING:
            return value
        value = self._old.pop(slot, MISSING)
        if value is not MISSING:
            self.keep(slot, value)  # type: ignore[arg-type]
        return value

    def keep(self, slot: Slot, value: bytes | None) -> None:
        """``slot``'s value as just read from the local copy."""
        size = _entry(slot, value)
        if self._new_bytes + size > self._half:
            if size > self._half:
                return  # larger than a generation: never kept
            self._old, self._new, self._new_bytes = self._new, {}, 0
        self._new[slot] = value
        self._new_bytes += size

    def written(self, slot: Slot, value: bytes | None) -> None:
        """``slot`` was written ``value`` in the local copy: its entry in the newer
        generation follows -- unless it would grow that generation past its half, when
        it is dropped -- and one in the older is dropped (read again when asked)."""
        kept = self._new.get(slot, MISSING)
        if kept is not MISSING:
            grown = _size(value) - _size(kept)  # type: ignore[arg-type]
            if self._new_bytes + grown > self._half:
                del self._new[slot]
                self._new_bytes -= _entry(slot, kept)  # type: ignore[arg-type]
            else:
                self._new[slot] = value
                self._new_bytes += grown
        else:
            self._old.pop(slot, None)

    def __len__(self) -> int:
        return len(self._new) + len(self._old)


def _size(value: bytes | None) -> int:
    return 0 if value is None else len(value)


def _entry(slot: Slot, value: bytes | None) -> int:
    """What an entry counts against the budget: its key, its value, ``ENTRY_OVERHEAD``."""
    return len(slot[1]) + _size(value) + ENTRY_OVERHEAD
