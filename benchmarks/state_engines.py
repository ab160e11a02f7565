"""``python -m benchmarks state-engines``: the local copy of a state store, three engines.

What eosflow's stores ask of the engine, measured alike for SQLite (the standard
library's ``sqlite3``, WAL, ``synchronous=NORMAL``), RocksDB (``rocksdict``, as
quixstreams uses) and LMDB (``lmdb``):

- **commit**: a transaction's writes applied in one atomic batch together with the
  store's checkpoint (changelog offset and input position), ``--batch`` distinct keys a
  batch, until ``--keys`` keys are written (what a committed transaction does);
- **read**: point reads of random existing keys (a ``get`` that misses the transaction's
  own writes);
- **restore**: a bulk load of ``--keys`` changelog records, ``--restore-batch`` a batch
  with the checkpoint (what restoring from the changelog does);
- **scan**: a key-range scan over the whole store, in key order;
- **memory**: the process's peak RSS (``VmHWM``) growth over the whole run.

Each engine runs in a child process of its own (clean RSS), in turns, ``--reps`` times;
the table gives medians and the spread. The engine that eosflow uses is SQLite
(``benchmarks/README.md`` gives the figures and the reasons).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

ENGINES = ("sqlite", "rocksdict", "lmdb")


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _key(i: int) -> bytes:
    return b"key-%010d" % i


def _value(i: int) -> bytes:
    return b"%d" % i + b"x" * 40  # a JSON-ish count or small record


class _Sqlite:
    def __init__(self, path: str) -> None:
        import sqlite3

        self.db = sqlite3.connect(os.path.join(path, "s.sqlite"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
        self.db.execute("CREATE TABLE cp (s TEXT PRIMARY KEY, o INTEGER, p INTEGER)")

    def apply(self, items: list[tuple[bytes, bytes]], offset: int) -> None:
        db = self.db
        db.execute("BEGIN")
        db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", items)
        db.execute("INSERT OR REPLACE INTO cp VALUES ('s', ?, ?)", (offset, offset))
        db.execute("COMMIT")

    def getter(self) -> Callable[[bytes], Any]:
        cur = self.db.cursor()
        sql = "SELECT v FROM kv WHERE k = ?"

        def get(k: bytes) -> Any:
            row = cur.execute(sql, (k,)).fetchone()
            return None if row is None else row[0]

        return get

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.db.execute("SELECT k, v FROM kv ORDER BY k"))

    def close(self) -> None:
        self.db.close()


class _Rocks:
    def __init__(self, path: str) -> None:
        from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteBatch

        self._batch = WriteBatch
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_write_buffer_size(16 << 20)  # quixstreams' 64 MiB x 3 would break 200 MiB
        opts.set_max_write_buffer_number(2)
        table = BlockBasedOptions()
        table.set_block_cache(Cache(16 << 20))
        table.set_bloom_filter(10, False)
        opts.set_block_based_table_factory(table)
        self.db = Rdict(os.path.join(path, "r"), opts)

    def apply(self, items: list[tuple[bytes, bytes]], offset: int) -> None:
        wb = self._batch(raw_mode=True)
        for k, v in items:
            wb.put(k, v)
        wb.put(b"\x00cp", b"%d" % offset)
        self.db.write(wb)

    def getter(self) -> Callable[[bytes], Any]:
        return self.db.get

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(self.db.items())

    def close(self) -> None:
        self.db.close()


class _Lmdb:
    def __init__(self, path: str) -> None:
        import lmdb

        self.env = lmdb.open(os.path.join(path, "l"), map_size=64 << 30, sync=False, metasync=False)

    def apply(self, items: list[tuple[bytes, bytes]], offset: int) -> None:
        with self.env.begin(write=True) as txn:
            cur = txn.cursor()
            cur.putmulti(items)
            txn.put(b"\x00cp", b"%d" % offset)

    def getter(self) -> Callable[[bytes], Any]:
        txn = self.env.begin(buffers=False)
        return txn.get

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        txn = self.env.begin()
        return iter(txn.cursor())

    def close(self) -> None:
        self.env.close()


def _open(engine: str, path: str) -> Any:
    return {"sqlite": _Sqlite, "rocksdict": _Rocks, "lmdb": _Lmdb}[engine](path)


def measure(
    engine: str, keys: int, batch: int, restore_batch: int, reads: int, hot: int
) -> dict[str, Any]:
    """One engine, in this process: the rates and the peak RSS growth."""
    base_rss = _rss_kib()
    out: dict[str, Any] = {"engine": engine}
    root = tempfile.mkdtemp(prefix=f"eosflow-engine-{engine}-")
    try:
        store = _open(engine, root)
        order = list(range(keys))
        random.Random(1).shuffle(order)  # keys arrive in no particular order
        t0 = time.perf_counter()
        for start in range(0, keys, batch):
            chunk = order[start : start + batch]
            store.apply([(_key(i), _value(i)) for i in chunk], start)
        out["commit_keys_per_s"] = keys / (time.perf_counter() - t0)
        get = store.getter()
        rnd = random.Random(3)
        t0 = time.perf_counter()
        for start in range(0, keys, batch):
            get = store.getter()  # a fresh read view per commit (LMDB: no stale snapshot)
            got = []
            for _ in range(batch):
                k = _key(rnd.randrange(hot or keys))
                v = get(k)
                got.append((k, b"%d" % (int(v[: v.index(b"x")]) + 1) + b"x" * 40))
            store.apply(got, start)
        out["count_per_s"] = keys / (time.perf_counter() - t0)
        get = store.getter()
        probe = [_key(random.Random(2).randrange(keys)) for _ in range(reads)]
        t0 = time.perf_counter()
        for k in probe:
            get(k)
        out["read_per_s"] = reads / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        n = sum(1 for k, _ in store.scan() if k != b"\x00cp")
        out["scan_per_s"] = n / (time.perf_counter() - t0)
        assert n == keys, (engine, n)
        store.close()
        shutil.rmtree(root)
        os.makedirs(root)
        store = _open(engine, root)
        t0 = time.perf_counter()
        for start in range(0, keys, restore_batch):
            store.apply([(_key(i), _value(i)) for i in range(start, start + restore_batch)], start)
        out["restore_per_s"] = keys / (time.perf_counter() - t0)
        store.close()
        out["disk_mib"] = sum(
            os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs
        ) / (1 << 20)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out["peak_rss_growth_mib"] = (_rss_kib() - base_rss) / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1_000, help="distinct keys a commit")
    ap.add_argument("--restore-batch", type=int, default=10_000)
    ap.add_argument("--reads", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--hot", type=int, default=0, help="count workload: keys drawn from the first N (0: all)"
    )
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--json", help="write the runs here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(measure(a.child, a.keys, a.batch, a.restore_batch, a.reads, a.hot)))
        return
    runs: list[dict[str, Any]] = []
    for rep in range(a.reps):
        for engine in a.engines:
            cmd = [sys.executable, "-m", "benchmarks.state_engines", "--child", engine]
            cmd += ["--keys", str(a.keys), "--batch", str(a.batch)]
            cmd += ["--restore-batch", str(a.restore_batch), "--reads", str(a.reads)]
            cmd += ["--hot", str(a.hot)]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout)
            res["rep"] = rep
            runs.append(res)
            print(f"turn {rep + 1}/{a.reps} {engine}: done", file=sys.stderr, flush=True)
    cols = ["commit_keys_per_s", "count_per_s", "read_per_s", "restore_per_s", "scan_per_s"]
    cols += ["peak_rss_growth_mib", "disk_mib"]
    print(
        f"{a.keys:,} keys, {a.batch:,} a commit, {a.restore_batch:,} a restore batch; "
        f"medians of {a.reps} (min-max)"
    )
    print("engine     " + " ".join(f"{c:>26}" for c in cols))
    for engine in a.engines:
        mine = [r for r in runs if r["engine"] == engine]
        cells = []
        for c in cols:
            vals = [r[c] for r in mine]
            cells.append(f"{statistics.median(vals):,.0f} ({min(vals):,.0f}-{max(vals):,.0f})")
        print(f"{engine:<10} " + " ".join(f"{x:>26}" for x in cells))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
