"""``Sizes``: what the console shows of the state stores -- each ready local copy's keys
and bytes, and a tumbling or hopping window's windows open -- sampled by the operations
ticker about once a second (``Stores.state_now``), on the event loop.

**Keys are counted, not estimated.** RocksDB's ``estimate-num-keys`` counts each
overwrite still in a memtable and takes deletes off twice: a count store updated a
million times reads far above its keys, a window store whose closed windows were
deleted can read 0. Counting every key at every sample would scan every store each
second. Instead the counter walks the stores ``KEYS_PER_SAMPLE`` keys a sample in all,
store after store, resuming after the last key it saw with a fresh iterator (nothing is
pinned between samples), and shows each store's count as of its last complete walk
(None before the first). A store that fits in one sample's budget is counted exactly
at each sample it is walked; a larger one over ``keys / KEYS_PER_SAMPLE`` samples, while
it keeps changing: its figure is then close, not exact. eosflow's own keys (a window's
stream time, the position record) are not counted.

**Bytes** are RocksDB's: its files and memtables (a few property reads). **Windows
open** are the windows holding values, found one seek a window (``open_windows``).

The trade-off: at 2,000 keys a sample the walk costs about a millisecond of the loop a
second (0.1%), and a store of a million keys is recounted every eight minutes or so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .._records import Partition, StoreSize
from ._local import LocalPartition
from ._store import RESERVED_KEY
from ._windows import TIME_KEY, open_windows

KEYS_PER_SAMPLE = 2_000
"""Keys walked per sample, over all stores together."""

_Key = tuple[Partition, str]


class Sizes:
    def __init__(self, keys_per_sample: int = KEYS_PER_SAMPLE) -> None:
        self._budget = keys_per_sample
        self._counted: dict[_Key, int] = {}  # each store's last complete walk
        self._walks: dict[_Key, tuple[bytes, int]] = {}  # walking: (last key seen, count)
        self._next: _Key | None = None  # the store the next sample walks first

    def sample(
        self,
        copies: Mapping[Partition, LocalPartition],
        ready: Collection[Partition],
        windows: Collection[str],
    ) -> list[StoreSize]:
        """Each store of each partition of ``ready`` with a local copy in ``copies``, in
        partition and store order; ``windows`` name the tumbling and hopping windows."""
        stores = [(p, s) for p in sorted(ready) if p in copies for s in copies[p].stores]
        live = set(stores)
        for gone in (self._counted.keys() | self._walks.keys()) - live:
            self._counted.pop(gone, None)
            self._walks.pop(gone, None)
        self._walk(stores, copies, windows)
        out = []
        for p, s in stores:
            local, counted = copies[p], self._counted.get((p, s))
            size = local.size(s)
            if s not in windows:
                out.append(StoreSize(p, s, counted, size))
                continue
            starts, now = open_windows(local.seeker(s))
            oldest = starts[0] if starts else None
            out.append(StoreSize(p, s, counted, size, len(starts), oldest, now))
        return out

    def _walk(
        self,
        stores: list[_Key],
        copies: Mapping[Partition, LocalPartition],
        windows: Collection[str],
    ) -> None:
        """Spend this sample's budget walking ``stores``, from the one the last sample
        stopped in, each at most once."""
        if not stores:
            return
        first = stores.index(self._next) if self._next in stores else 0
        budget = self._budget
        for i in range(len(stores)):
            key = stores[(first + i) % len(stores)]
            self._next = key
            if budget <= 0:
                return
            partition, store = key
            after, seen = self._walks.pop(key, (None, 0))
            found = copies[partition].keys_after(store, after, budget)
            own = (RESERVED_KEY, TIME_KEY) if store in windows else (RESERVED_KEY,)
            seen += sum(1 for k in found if k not in own)
            if len(found) == budget:  # the budget ran out here: go on from it next time
                self._walks[key] = (found[-1], seen)
                return
            budget -= len(found)
            self._counted[key] = seen  # walked to its end
        self._next = stores[first]
