"""``Sizes``: what the console shows of the state stores -- each ready local copy's keys
and bytes, and a window's windows open -- sampled by the operations ticker about once a
second (``Stores.state_now``), on the event loop, so its cost is bounded.

**Keys are counted, not estimated.** RocksDB's ``estimate-num-keys`` counts each
overwrite still in a memtable and takes deletes off twice: a count store updated a
million times reads far above its keys, a window store whose closed windows were
deleted can read 0. Counting every key at every sample would scan every store each
second. Instead the counter walks the stores ``KEYS_PER_SAMPLE`` keys a sample in all,
store after store, resuming after the last key it saw with a fresh iterator (nothing is
pinned between samples), and shows each store's count as of its last complete walk
(None before the first). A walk ends at the key that was the store's last when it
began, so a store growing faster than the walk still finishes (what it gained past
that key waits for the next walk) and the stores after it get their turn. A store that
fits in one sample's budget is counted exactly at each sample it is walked; a larger
one over ``keys / KEYS_PER_SAMPLE`` samples, while it keeps changing: its figure is
then close, not exact. A walk is dropped when its copy is replaced or wiped. eosflow's
own keys (a window's stream time, the position record) are not counted; a sliding
window keeps two keys a contribution, both counted.

**Bytes** are RocksDB's: its files and memtables (a few property reads). **Windows
open**: a tumbling or hopping window's are the windows holding values, found one seek a
window from the oldest start that can still be open (stream time - size - grace: the
windows before it were deleted when they closed, and a scan from the first key would
step over their deletion markers), at most ``WINDOWS_MOST``; a walk of a window store
starts there too. A session window's are its sessions, counted by the walk (one
closing-order key a session, ``_sessions.ENDS``; its keys are then the sessions'
values). A sliding window keeps contributions, not windows: its row has no count.

The trade-off: at 2,000 keys a sample the walk costs about half a millisecond of the
loop a second, and a store of a million keys is recounted every eight minutes or so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .._records import Partition, StoreSize
from ._local import LocalPartition
from ._sessions import ENDS, Session
from ._store import RESERVED_KEY
from ._windows import TIME_KEY, Hopping, Tumbling, data_key, open_windows, stream_time

KEYS_PER_SAMPLE = 2_000
"""Keys walked per sample, over all stores together."""
WINDOWS_MOST = 1_000
"""Windows counted open per window store and sample (one seek each)."""

_Key = tuple[Partition, str]


class _Walk:
    """A walk of one store under way: the key it is after (None: from the first), the
    key it ends at (the store's last when it began), what it counted so far."""

    __slots__ = ("after", "last", "seen", "sessions")

    def __init__(self, after: bytes | None, last: bytes) -> None:
        self.after, self.last = after, last
        self.seen = self.sessions = 0


class Sizes:
    def __init__(self, keys_per_sample: int = KEYS_PER_SAMPLE) -> None:
        self._budget = keys_per_sample
        # each store's last complete walk: (keys, sessions among them)
        self._counted: dict[_Key, tuple[int, int]] = {}
        self._walks: dict[_Key, _Walk] = {}
        self._copies: dict[_Key, tuple[int, int]] = {}  # the copy walked: (id, wipes)
        self._next: _Key | None = None  # the store the next sample walks first

    def sample(
        self,
        copies: Mapping[Partition, LocalPartition],
        ready: Collection[Partition],
        windows: Mapping[str, object],
    ) -> list[StoreSize]:
        """Each store of each partition of ``ready`` with a local copy in ``copies``, in
        partition and store order; ``windows``: the window specs by store name."""
        stores = [(p, s) for p in sorted(ready) if p in copies for s in copies[p].stores]
        for key in stores:  # a copy replaced or wiped: what was counted of it is void
            local = copies[key[0]]
            copy = (id(local), local.wipes)
            if self._copies.get(key) != copy:
                self._copies[key] = copy
                self._counted.pop(key, None)
                self._walks.pop(key, None)
        live = set(stores)
        for gone in (self._counted.keys() | self._walks.keys() | self._copies.keys()) - live:
            self._counted.pop(gone, None)
            self._walks.pop(gone, None)
            self._copies.pop(gone, None)
        self._walk(stores, copies, windows)
        out = []
        for p, s in stores:
            local, spec = copies[p], windows.get(s)
            keys, sessions = self._counted.get((p, s), (None, None))
            row = StoreSize(p, s, keys, local.size(s))
            if isinstance(spec, Session):  # its keys: the sessions' values and their ends
                now = stream_time(local.seeker(s))
                values = None if keys is None or sessions is None else keys - sessions
                row = row._replace(keys=values, windows=sessions, stream_time_ms=now)
            elif isinstance(spec, (Tumbling, Hopping)):
                starts, now = open_windows(local.seeker(s), WINDOWS_MOST, _reach(spec))
                oldest = starts[0] if starts else None
                row = row._replace(windows=len(starts), oldest_ms=oldest, stream_time_ms=now)
            out.append(row)
        return out

    def _walk(
        self,
        stores: list[_Key],
        copies: Mapping[Partition, LocalPartition],
        windows: Mapping[str, object],
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
            partition, store = key
            local, spec = copies[partition], windows.get(store)
            walk = self._walks.pop(key, None)
            if walk is None:
                last = local.last_key(store)
                if last is None:  # empty
                    self._counted[key] = (0, 0)
                    continue
                start = None
                if isinstance(spec, (Tumbling, Hopping)):  # from the oldest open window
                    now = stream_time(local.seeker(store))
                    start = None if now is None else data_key(now - _reach(spec), b"")
                walk = _Walk(start, last)
            found = local.keys_after(store, walk.after, budget, walk.last)
            own = (RESERVED_KEY, TIME_KEY) if spec is not None else (RESERVED_KEY,)
            walk.seen += sum(1 for k in found if k not in own)
            if isinstance(spec, Session):
                walk.sessions += sum(1 for k in found if k[:1] == ENDS)
            if len(found) == budget and found[-1] != walk.last:  # go on from it next time
                walk.after = found[-1]
                self._walks[key] = walk
                return
            budget -= len(found)
            self._counted[key] = (walk.seen, walk.sessions)  # walked to its end
            if budget <= 0:
                self._next = stores[(first + i + 1) % len(stores)]
                return
        self._next = stores[first]


def _reach(spec: Tumbling | Hopping) -> int:
    """How far before the stream time a window of ``spec`` may start and still be open:
    its size and grace (``_windows``: a closed window is deleted as it closes)."""
    return spec.size_ms + spec.grace_ms
