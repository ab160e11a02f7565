"""``ReadCache``: the values the local copies gave lately, kept in memory.

A store's point read (``Store.get``, a window's value, a table's row) goes to the open
transaction's writes, then the sealed transaction's, then the local copy: RocksDB
through rocksdict, 1.1 to 1.6 us a read measured here (33,000 keys of 100 B, in the
memtable or flushed). That read is the largest single cost of a windowed count -- every
record reads its key-window's value, written by an earlier transaction and so no longer
in the layers -- and of a join, where every order reads its customer's row. Kafka
Streams keeps such values in memory across commits (its record cache, 10 MiB by
default); this is eosflow's.

- **Filled by reads and by writes.** A value read from a local copy, or its absence, is
  kept. ``LocalPartition.apply`` -- every commit, every restore batch, the only way
  anything is written to a local copy -- keeps every key it writes, a delete as an
  absence, in one call per store (a dict update, not a Python step per key: a commit
  of a windowed count writes thousands). ``wipe`` and ``close`` give the store a new
  tag, so nothing kept of what they dropped is read again.
- **Bounded** at ``budget_bytes`` for an app's stores (``Env``, one per ``Stores``:
  ``EosConfig.state_cache_bytes``, 64 MiB by default), in two generations of half of it
  each, an entry counted as its key, its value and ``ENTRY_OVERHEAD`` bytes (Python's
  objects and the dict slot). A read looks in the newer generation, then the older; a
  value found in the older moves to the newer; a full newer generation replaces the
  older. A commit's writes are counted whole, keys already kept included (an
  over-count, never an under-count). When the count says full, the newer generation
  is measured (one pass, in C) and turns only if it would be over three quarters full:
  so a table whose rows are updated in place, within the budget, stays whole and every
  read finds it in one probe (the benchmark's join of 1,000,000 orders had turned once
  and moved 55,082 rows back from the older generation; now it measures twice and
  turns none, one instrumented run each). Writes larger than a generation
  are not kept: the generations turn all the same (the older is dropped) and what the
  new older one held of their keys is dropped, so two such writes in a row -- a large
  restore batch -- leave the cache empty. So recently read or written keys stay, and a
  key space larger than the budget pays one dict lookup more than RocksDB alone.

Trade-off: up to ``budget_bytes`` of memory for reads that skip RocksDB; the bound
holds whatever the number of partitions. The cache never decides what a read returns:
a miss reads the local copy as before. Every key written is kept, read again or not: a
restore of a large table turns the generations over and drops what reads had kept.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from .._native import bind_reader, named_as

ENTRY_OVERHEAD = 120  # bytes: two bytes objects' headers (33 each), a dict slot (~52)
MISSING = object()  # ``get``: not kept (None is kept: the key has no value)

Kept = dict[int, dict[bytes, bytes | None]]  # a store's tag -> its keys -> their values


class ReadCache:
    __slots__ = ("_half", "_new", "_new_bytes", "_old", "_over", "_tags")

    def __init__(self, budget_bytes: int) -> None:
        self._half = max(budget_bytes // 2, 0)
        self._new: Kept = {}
        self._old: Kept = {}
        self._new_bytes = 0
        self._over = False  # writes counted since the last measure: it may be below
        self._tags = itertools.count()

    def tag(self) -> int:
        """A tag for a store's keys no other store (or earlier life of it) has."""
        return next(self._tags)

    def get(self, tag: int, key: bytes) -> bytes | object | None:
        """The value kept for ``key`` of the store tagged ``tag`` (None: it has none), or
        ``MISSING``."""
        kept = self._new.get(tag)
        if kept is not None:
            value = kept.get(key, MISSING)
            if value is not MISSING:
                return value
        return self._older(tag, key)

    def _older(self, tag: int, key: bytes) -> bytes | object | None:
        """``get`` in the older generation (what it finds moves to the newer)."""
        kept = self._old.get(tag)
        if kept is None:
            return MISSING
        value = kept.pop(key, MISSING)
        if value is not MISSING:
            self.keep(tag, key, value)  # type: ignore[arg-type]
        return value

    def keep(self, tag: int, key: bytes, value: bytes | None) -> None:
        """``key``'s value as just read from the local copy."""
        size = len(key) + (0 if value is None else len(value)) + ENTRY_OVERHEAD
        if self._new_bytes + size > self._half:
            if size > self._half:
                return  # larger than a generation: never kept
            if not self._fits(size):
                self._turn()
        kept = self._new.get(tag)
        if kept is None:
            kept = self._new[tag] = {}
        kept[key] = value
        self._new_bytes += size

    def written(self, tag: int, writes: Mapping[bytes, bytes | None]) -> None:
        """``writes`` (key -> value, None: deleted) went to the local copy of the store
        tagged ``tag``: all of them are kept in the newer generation, or, larger than a
        generation, none, and the older generation's entries of their keys dropped."""
        if not writes:
            return
        size = sum(map(len, writes)) + sum(map(len, filter(None, writes.values())))
        size += ENTRY_OVERHEAD * len(writes)
        if self._new_bytes + size > self._half and not self._fits(size):
            self._turn()
            if size > self._half:
                old = self._old.get(tag)
                if old:
                    for key in writes:
                        old.pop(key, None)
                return
        kept = self._new.get(tag)
        if kept is None:
            kept = self._new[tag] = {}
        kept.update(writes)
        self._new_bytes += size
        self._over = True

    def _fits(self, size: int) -> bool:
        """Whether ``size`` more bytes fit the newer generation by its measured size
        (the count is an over-count: writes of keys it held were counted whole), with a
        quarter of it left free, so that a generation near full is not measured at
        every write. Measuring takes one pass over it, in C (``map``), no Python step
        an entry; the count becomes the measure."""
        if size > self._half // 4 or not self._over:
            return False
        self._over = False
        held = 0
        for kept in self._new.values():
            held += sum(map(len, kept)) + sum(map(len, filter(None, kept.values())))
            held += ENTRY_OVERHEAD * len(kept)
        self._new_bytes = held
        return held + size <= self._half - self._half // 4

    def _turn(self) -> None:
        """The newer generation becomes the older; the older is dropped."""
        self._old, self._new, self._new_bytes = self._new, {}, 0
        self._over = False

    def __len__(self) -> int:
        return sum(map(len, self._new.values())) + sum(map(len, self._old.values()))


class Reader:
    """One store's point reads through the cache, each in one call: what ``get`` and a
    miss's ``load`` (RocksDB) then ``keep`` take three calls for. Its ``LocalPartition``
    keeps one a store and renews ``tag`` and ``load`` in place when the store is wiped or
    reopened, so a holder's bound ``get`` stays right."""

    __slots__ = ("_cache", "load", "tag")

    def __init__(self, cache: ReadCache, tag: int, load: Callable[[bytes], bytes | None]) -> None:
        self._cache, self.tag, self.load = cache, tag, load

    def get(self, key: bytes) -> bytes | None:
        """``key``'s value (None: it has none): kept, else loaded and kept. (The newer
        generation's probe is ``ReadCache.get``'s, inline: a call fewer on every read.)"""
        tag, cache = self.tag, self._cache
        kept = cache._new.get(tag)
        if kept is not None:
            value = kept.get(key, MISSING)
            if value is not MISSING:
                return value  # type: ignore[return-value]
        value = cache._older(tag, key)
        if value is MISSING:
            value = self.load(key)
            cache.keep(tag, key, value)  # type: ignore[arg-type]
        return value  # type: ignore[return-value]


PYTHON_GET: Callable[..., Any] = Reader.__dict__["get"]
"""``Reader.get`` in Python: what runs without the compiled extension, and what the
compiled one is held to (``tests/unit/test_read_cache.py``)."""


def _compile() -> None:
    """The compiled ``get`` (``eosflow._native.bind_reader``) in place of the Python one,
    where the extension is built: the newer generation's dicts read in C."""
    compiled = bind_reader(Reader, ReadCache, MISSING, PYTHON_GET)
    if compiled is not None:
        setattr(Reader, "get", named_as(compiled, PYTHON_GET))  # noqa: B010


_compile()
