"""``Writes``: one store partition's writes in a layer (``_layers``), a dict that can
also answer a range of keys without looking at all of them.

A range read over the writes not yet on disk (``Store.range``) used to test every key
of the layer: O(writes) per read, so a processor reading a range per record -- a
session store finding the key's sessions, the timers finding what is due -- cost
O(records^2) per transaction (measured: 822 us a record for a timer per record in
20,000-record transactions, 107 us in 1,000-record ones).

So the second range read over a ``Writes`` builds a sorted index of its keys
(``SortedKeys``: sorted chunks of at most ``2 * _HALF`` keys, as sortedcontainers
does), and every new key written after that is inserted into it: O(log n + chunk) a
write, O(log n + keys in range) a read. Writes that see at most one range read (a plain
store's, the common case; a window store's, closing a window) never build one and pay
one attribute test a write; the one read scans them.

The index may hold a key the dict no longer has (``Layers.revert`` pops the writes of a
record that failed): reads take only keys still in the dict, and inserting a key twice
keeps one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

_HALF = 512  # a chunk splits in two of this size past twice it


class SortedKeys:
    __slots__ = ("_chunks", "_maxes")

    def __init__(self, keys: Iterable[bytes]) -> None:
        ordered = sorted(keys)
        self._chunks = [ordered[i : i + _HALF] for i in range(0, len(ordered), _HALF)]
        self._maxes = [chunk[-1] for chunk in self._chunks]

    def add(self, key: bytes) -> None:
        chunks, maxes = self._chunks, self._maxes
        if not chunks:
            chunks.append([key])
            maxes.append(key)
            return
        i = min(bisect_left(maxes, key), len(maxes) - 1)
        chunk = chunks[i]
        j = bisect_left(chunk, key)
        if j < len(chunk) and chunk[j] == key:
            return
        chunk.insert(j, key)
        maxes[i] = chunk[-1]
        if len(chunk) > 2 * _HALF:
            chunks[i : i + 1] = [chunk[:_HALF], chunk[_HALF:]]
            maxes[i : i + 1] = [chunk[_HALF - 1], chunk[-1]]

    def between(self, lo: bytes | None, hi: bytes | None) -> list[bytes]:
        """The keys in ``[lo, hi)`` (open ends when None), in order."""
        chunks, maxes = self._chunks, self._maxes
        i = 0 if lo is None else bisect_left(maxes, lo)
        out: list[bytes] = []
        first = True
        while i < len(chunks):
            chunk = chunks[i]
            j = bisect_left(chunk, lo) if first and lo is not None else 0
            first = False
            if hi is not None and chunk[-1] >= hi:
                out.extend(chunk[j : bisect_left(chunk, hi)])
                return out
            out.extend(chunk[j:])
            i += 1
        return out

    def __len__(self) -> int:
        return sum(len(c) for c in self._chunks)


class Writes(dict[bytes, bytes | None]):
    """key -> serialized value, or None for a delete; ``index`` from the second range
    read on (a single one -- a window store's close, once a window -- scans instead of
    making every later write pay for the index)."""

    __slots__ = ("_reads", "index")

    def __init__(self) -> None:
        super().__init__()
        self.index: SortedKeys | None = None
        self._reads = 0

    def between(self, lo: bytes | None, hi: bytes | None) -> list[tuple[bytes, bytes | None]]:
        """(key, write) for the keys in ``[lo, hi)``, in key order."""
        if self.index is None:
            self._reads += 1
            if self._reads < 2:
                return sorted(
                    (k, v)
                    for k, v in self.items()
                    if (lo is None or k >= lo) and (hi is None or k < hi)
                )
            self.index = SortedKeys(self)
        return [(k, self[k]) for k in self.index.between(lo, hi) if k in self]
