"""``LocalPartition``: the local copy of one input partition's stores, on disk.

RocksDB through ``rocksdict``: one database per input partition, a column family per
store and one (``eosflow``) for the checkpoints. Chosen by measurement
(``python -m benchmarks state-engines``, figures in ``benchmarks/README.md``): against
SQLite and LMDB it wrote a committed transaction's keys 6x faster than SQLite, restored
3.5x faster, and kept memory bounded (its memtables and block cache are capped and
shared by every database of the process: ``Env``), where LMDB's mapped pages grow the
resident set with the data.

Durability: the local copy is a cache of the changelog, never the truth. ``apply``
writes a transaction's changes and the checkpoint of each store it touched in one atomic
batch (RocksDB's write-ahead log, not synced: a process crash loses nothing, a power
loss at worst an atomic suffix, which the changelog restores). A checkpoint says what
the store reflects: the next changelog offset to read, the offset of the last position
record applied (``RESERVED_KEY``), and that record's input position. It is trusted only
once the changelog confirms it (``_restore``).

Locking: RocksDB locks a database for one process. Each instance (transactional id)
has its own directory; should another live process hold one (an instance with the same
transactional id still running), this one uses a fresh directory beside it, restored
from the changelog, and deletes it on close.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import ConfigError, FatalError
from ._cache import ReadCache, Reader

log = logging.getLogger("eosflow.state")

_META_CF = "eosflow"
_CHECKPOINT = struct.Struct(">qqq")  # next changelog offset, last position record, position
_NO_POSITION = -(2**63)  # a position of None (nothing committed on the input)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a store's local copy stands. ``offset``: the next changelog offset to read;
    ``marker``: the changelog offset of the last position record applied (-1: none);
    ``position``: that record's input offset (None: nothing consumed yet)."""

    offset: int
    marker: int
    position: int | None

    def encode(self) -> bytes:
        pos = _NO_POSITION if self.position is None else self.position
        return _CHECKPOINT.pack(self.offset, self.marker, pos)

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint:
        offset, marker, pos = _CHECKPOINT.unpack(data)
        return cls(offset, marker, None if pos == _NO_POSITION else pos)


EMPTY = Checkpoint(0, -1, None)


class Env:
    """What every local database of an app shares (one ``Env`` per ``Stores``): the block
    cache, the memtable budget (RocksDB's write buffer manager) and the read cache in
    front of them (``_cache``, ``EosConfig.state_cache_bytes``). Defaults keep an app
    with a million keys under 250 MiB: 16 MiB of block cache, 32 MiB of memtables,
    64 MiB of read cache in all."""

    def __init__(
        self,
        cache_bytes: int = 16 << 20,
        memtable_bytes: int = 32 << 20,
        read_cache_bytes: int = 64 << 20,
    ) -> None:
        import rocksdict

        self._rocksdict = rocksdict
        self.cache = rocksdict.Cache(cache_bytes)
        self.memtables = rocksdict.WriteBufferManager(memtable_bytes, False)
        self.reads = ReadCache(read_cache_bytes)

    def options(self) -> Any:
        rd = self._rocksdict
        opts = rd.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        opts.set_write_buffer_size(8 << 20)
        opts.set_max_write_buffer_number(2)
        opts.set_write_buffer_manager(self.memtables)
        table = rd.BlockBasedOptions()
        table.set_block_cache(self.cache)
        table.set_bloom_filter(10, False)
        opts.set_block_based_table_factory(table)
        return opts


def instance_dir(state_dir: str, group_id: str, transactional_id: str) -> Path:
    """``state_dir/<group>/<transactional id>``, each name made safe for a path."""
    return Path(state_dir) / _safe(group_id) / _safe(transactional_id)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", lambda m: f"%{ord(m.group()):02X}", name) or "%"


class LocalPartition:
    """The stores of input partition ``partition`` on disk, under ``root``."""

    def __init__(
        self, root: Path, partition: tuple[str, int], stores: Sequence[str], env: Env
    ) -> None:
        self.partition = partition
        self.stores = tuple(stores)
        self._env = env
        topic, p = partition
        self.path = root / f"{_safe(topic)}-{p}"
        self._own = self.path  # the directory to delete on close if it is a fallback
        self._db = self._open()
        self._cf: dict[str, Any] = {}
        self._handle: dict[str, Any] = {}
        self._reads = env.reads
        self._readers: dict[str, Reader] = {}  # store -> its reads through the read cache
        self.wipes = 0  # stores wiped so far: what was counted of them before is void
        self._refresh()

    def _open(self) -> Any:
        try:
            return self._open_at(self.path)
        except Exception as exc:
            if "lock" not in str(exc).lower():
                raise FatalError(f"opening the local state at {self.path}: {exc}") from exc
            fallback = self.path.with_name(f"{self.path.name}.{os.getpid()}")
            log.warning(
                "the local state at %s is locked by another process (an instance with "
                "the same transactional id still running?); using %s, restored from the "
                "changelog",
                self.path,
                fallback,
            )
            shutil.rmtree(fallback, ignore_errors=True)
            self.path = fallback
            return self._open_at(fallback)

    def _open_at(self, path: Path) -> Any:
        rd = self._env._rocksdict
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"state_dir: cannot create {path}: {exc}") from exc
        names = {*self.stores, _META_CF}
        with contextlib.suppress(Exception):  # a new database has no column families yet
            names |= set(rd.Rdict.list_cf(str(path), rd.Options(raw_mode=True))) - {"default"}
        opts = self._env.options()
        return rd.Rdict(str(path), opts, column_families={n: self._env.options() for n in names})

    def _refresh(self) -> None:
        for name in (*self.stores, _META_CF):
            self._cf[name] = self._db.get_column_family(name)
            self._handle[name] = self._db.get_column_family_handle(name)
            tag, load = self._reads.tag(), self._cf[name].get  # a new tag: nothing kept
            reader = self._readers.get(name)  # of before is read
            if reader is None:
                self._readers[name] = Reader(self._reads, tag, load)
            else:  # renewed in place: a Store holds its get
                reader.tag, reader.load = tag, load

    # --- reads -----------------------------------------------------------------

    def get(self, store: str, key: bytes) -> bytes | None:
        """``key``'s value in ``store``: from the read cache when kept there (``_cache``),
        else from RocksDB, then kept."""
        return self._readers[store].get(key)

    def reader(self, store: str) -> Reader:
        """``store``'s reads (``get``), renewed in place by a wipe: a holder keeps it."""
        return self._readers[store]

    def items(
        self, store: str, lo: bytes | None, hi: bytes | None
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of ``store`` in ``[lo, hi)``, in byte order."""
        it = self._cf[store].iter()
        if lo is None:
            it.seek_to_first()
        else:
            it.seek(lo)
        while it.valid():
            key = it.key()
            if hi is not None and key >= hi:
                return
            yield key, it.value()
            it.next()

    def size(self, store: str) -> int:
        """``store``'s bytes, its files and memtables, as RocksDB tells them: two
        property reads, no scan."""
        cf = self._cf[store]
        files = cf.property_int_value("rocksdb.total-sst-files-size") or 0
        return int(files) + int(cf.property_int_value("rocksdb.size-all-mem-tables") or 0)

    def keys_after(self, store: str, after: bytes | None, most: int, last: bytes) -> list[bytes]:
        """At most ``most`` keys of ``store`` in byte order, none past ``last``, from its
        first (``after`` None) or from the first after ``after``: a fresh iterator each
        call."""
        it, keys = self._cf[store].iter(), list[bytes]()
        if after is None:
            it.seek_to_first()
        else:
            it.seek(after)
            if it.valid() and it.key() == after:
                it.next()
        while len(keys) < most and it.valid():
            key = it.key()
            if key > last:
                break
            keys.append(key)
            it.next()
        return keys

    def last_key(self, store: str) -> bytes | None:
        """``store``'s last key in byte order (None: empty)."""
        it = self._cf[store].iter()
        it.seek_to_last()
        return it.key() if it.valid() else None  # type: ignore[no-any-return]

    def seeker(self, store: str) -> Callable[[bytes], tuple[bytes, bytes] | None]:
        """The first (key, value) of ``store`` at or after a given key (None past the
        last), read past the read cache: one iterator, sought again at each call (a skip
        scan costs a seek a step)."""
        it = self._cf[store].iter()

        def first(at: bytes) -> tuple[bytes, bytes] | None:
            it.seek(at)
            return (it.key(), it.value()) if it.valid() else None

        return first

    def checkpoint(self, store: str) -> Checkpoint:
        raw = self._cf[_META_CF].get(store.encode())
        return EMPTY if raw is None else Checkpoint.decode(raw)

    # --- writes ----------------------------------------------------------------

    def apply(
        self,
        changes: Mapping[str, Mapping[bytes, bytes | None]],
        checkpoints: Mapping[str, Checkpoint],
    ) -> None:
        """Write ``changes`` (store -> key -> value, None deletes) and ``checkpoints``
        in one atomic batch."""
        batch = self._env._rocksdict.WriteBatch(raw_mode=True)
        for store, writes in changes.items():
            handle = self._handle[store]
            for key, value in writes.items():
                if value is None:
                    batch.delete(key, handle)
                else:
                    batch.put(key, value, handle)
        meta = self._handle[_META_CF]
        for store, cp in checkpoints.items():
            batch.put(store.encode(), cp.encode(), meta)
        self._db.write(batch)
        for store, writes in changes.items():  # the read cache keeps what was written
            self._reads.written(self._readers[store].tag, writes)

    def wipe(self, store: str) -> None:
        """Forget everything of ``store``: its checkpoint first, synced to disk, then its
        data. (The other order could leave, after a power loss, an empty store under a
        checkpoint the changelog still confirms.)"""
        sync = self._env._rocksdict.WriteOptions()
        sync.sync = True
        reader = self._readers[store]
        # first: if the drop fails, nothing kept is read, nor the dropped family
        reader.tag, reader.load = self._reads.tag(), _closed
        self._cf[_META_CF].delete(store.encode(), sync)
        self.wipes += 1
        self._cf[store] = self._handle[store] = None
        self._db.drop_column_family(store)
        self._db.create_column_family(store, self._env.options())
        self._refresh()

    def close(self) -> None:
        self._cf.clear()
        self._handle.clear()
        for reader in self._readers.values():  # what the read cache kept is never read again
            reader.tag = self._reads.tag()
            reader.load = _closed  # (and the column family it read goes: the lock with it)
        with contextlib.suppress(Exception):
            self._db.close()
        if self.path != self._own:  # a fallback directory: nothing to keep
            shutil.rmtree(self.path, ignore_errors=True)


def _closed(key: bytes) -> bytes | None:
    raise FatalError("a store of a closed local copy was read (a bug in eosflow)")
