"""The test kit's PostgreSQL (``eosflow.testing._postgres.Postgres``): what it leaves
behind when a stop is cancelled or a start cannot happen."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from eosflow import ConfigError
from eosflow.testing._postgres import Postgres


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
