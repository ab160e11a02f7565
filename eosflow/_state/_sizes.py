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
open**: a tumbling or hopping window's are the windows holding values, found one seek a
window (``open_windows``); a session window's are its sessions, counted by the same walk
(one closing-order key a session, ``_sessions.ENDS``; its keys are then the sessions'
values). A sliding window keeps contributions, not windows: its row has no count.

The trade-off: at 2,000 keys a sample the walk costs about a millisecond of the loop a
second (0.1%), and a store of a million keys is recounted every eight minutes or so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .._records import Partition, StoreSize
from ._local import LocalPartition
from ._sessions import ENDS
from ._store import RESERVED_KEY
from ._windows import TIME_KEY, open_windows

KEYS_PER_SAMPLE = 2_000
"""Keys walked per sample, over all stores together."""

_Key = tuple[Partition, str]


class Sizes:
    def __init__(self, keys_per_sample: int = KEYS_PER_SAMPLE) -> None:
        self._budget = keys_per_sample
        # each store's last complete walk: (keys, sessions among them)
        self._counted: dict[_Key, tuple[int, int]] = {}
        self._walks: dict[_Key, tuple[bytes | None, int, int]] = {}  # last key seen, counts
        self._next: _Key | None = None  # the store the next sample walks first

    def sample(
        self,
        copies: Mapping[Partition, LocalPartition],
        ready: Collection[Partition],
        windows: Collection[str],
        sessions: Collection[str] = (),
    ) -> list[StoreSize]:
        """Each store of each partition of ``ready`` with a local copy in ``copies``, in
        partition and store order; ``windows`` name the tumbling and hopping windows,
        ``sessions`` the session windows."""
        stores = [(p, s) for p in sorted(ready) if p in copies for s in copies[p].stores]
        live = set(stores)
        for gone in (self._counted.keys() | self._walks.keys()) - live:
            self._counted.pop(gone, None)
            self._walks.pop(gone, None)
        timed = {*windows, *sessions}
        self._walk(stores, copies, timed, sessions)
        out = []
        for p, s in stores:
            local, counted = copies[p], self._counted.get((p, s))
            keys, ends = counted if counted is not None else (None, None)
            row = StoreSize(p, s, keys, local.size(s))
            if s in sessions:  # its keys: the sessions' values, beside one end key each
                now = open_windows(local.seeker(s), most=0)[1]
                values = None if keys is None or ends is None else keys - ends
                row = row._replace(keys=values, windows=ends, stream_time_ms=now)
            elif s in windows:
                starts, now = open_windows(local.seeker(s))
                oldest = starts[0] if starts else None
                row = row._replace(windows=len(starts), oldest_ms=oldest, stream_time_ms=now)
            out.append(row)
        return out

    def _walk(
        self,
        stores: list[_Key],
        copies: Mapping[Partition, LocalPartition],
        timed: Collection[str],
        sessions: Collection[str],
    ) -> None:
        """Spend this sample's budget walking ``stores``, from the one the last sample
        stopped in, each at most once; ``timed`` stores keep a stream time key."""
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
            after, seen, ends = self._walks.pop(key, (None, 0, 0))
            found = copies[partition].keys_after(store, after, budget)
            own = (RESERVED_KEY, TIME_KEY) if store in timed else (RESERVED_KEY,)
            seen += sum(1 for k in found if k not in own)
            if store in sessions:
                ends += sum(1 for k in found if k[:1] == ENDS)
            if len(found) == budget:  # the budget ran out here: go on from it next time
                self._walks[key] = (found[-1], seen, ends)
                return
            budget -= len(found)
            self._counted[key] = (seen, ends)  # walked to its end
        self._next = stores[first]
