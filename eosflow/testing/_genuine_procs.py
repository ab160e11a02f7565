"""Processes of the genuine brokers: the ``java`` command line, spawning, and stopping by
pid (SIGTERM, a grace period, then SIGKILL).

Every JVM spawned here is remembered until it is stopped; an ``atexit`` hook stops those
left, and on Linux each one gets ``PR_SET_PDEATHSIG`` so that it is SIGKILLed if the
thread that started it dies (a SIGKILLed test run leaves no broker behind). Spawn them
from a long-lived thread -- the event loop's -- never from a short-lived worker thread.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .._timeouts import within

JVM_FLAGS = [  # those of Kafka's kafka-run-class.sh
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]

_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
"""

_LOG4J1 = """log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def java_command(
    libs: Path,
    conf_dir: Path,
    main: str,
    *args: str,
    heap_mb: int,
    log4j1: bool,
    level: str,
    classes: Path | None = None,
    system: Mapping[str, str] | None = None,
) -> list[str]:
    """``java -Xmx.. -cp 'libs/*' main args`` logging to stdout at ``level`` (log4j 1.2
    before Kafka 4, log4j 2 from it); ``classes``, a folder of compiled classes, goes
    first on the class path; ``system`` are Java system properties (``-Dkey=value``)."""
    if log4j1:
        conf = conf_dir / f"log4j-{level}.properties"
        conf.write_text(_LOG4J1.format(level=level))
        log_flag = f"-Dlog4j.configuration=file:{conf}"
    else:
        conf = conf_dir / f"log4j2-{level}.properties"
        conf.write_text(_LOG4J2.format(level=level))
        log_flag = f"-Dlog4j2.configurationFile={conf}"
    cp = f"{libs}/*" if classes is None else f"{classes}:{libs}/*"
    flags = [f"-D{k}={v}" for k, v in (system or {}).items()]
    return ["java", f"-Xmx{heap_mb}m", *JVM_FLAGS, *flags, log_flag, "-cp", cp, main, *args]


_live: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _stop_leftovers() -> None:
    for proc in list(_live):
        terminate(proc, grace_s=5.0)


def terminate(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGCONT (a stopped JVM cannot act on SIGTERM), SIGTERM, wait, then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _live.discard(proc)


def kill(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL and reap."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    _live.discard(proc)


def forget(proc: subprocess.Popen[bytes]) -> None:
    _live.discard(proc)


try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
except (OSError, AttributeError):
    _prctl = None


def _die_with_parent() -> None:
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def spawn(
    cmd: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` with its output appended to ``log``, in its own session (a terminal's
    Ctrl-C reaches only us; we stop it); ``env``: its whole environment, else ours."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    _live.add(proc)
    return proc


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports on 127.0.0.1."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path: Path, n: int) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


async def port_open(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


def make_home(prefix: str) -> Path:
    """A fresh temp folder owned by this process; folders of the same kind (the first two
    words of ``prefix``: ``eosflow-kafka``, ``eosflow-registry``) whose owner died without
    cleaning up (SIGKILLed) are removed first."""
    root = Path(tempfile.gettempdir())
    kind = "-".join(prefix.split("-")[:2])
    for old in root.glob(f"{kind}-*"):
        try:
            owner = int((old / "owner.pid").read_text())
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except (OSError, ValueError):
            continue  # not ours to judge (no pid file yet, or another user's)
    home = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    (home / "owner.pid").write_text(str(os.getpid()))
    return home


async def api_versions(port: int, timeout_s: float = 5.0) -> dict[int, int]:
    """The ApiVersions (v0) answer of the broker on ``port``: api key -> highest version.
    Raw on a socket, so that it asks exactly that broker."""
    client_id = b"eosflow-genuine"
    header = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    reader, writer = await within(asyncio.open_connection("127.0.0.1", port), timeout_s)
    try:
        writer.write(struct.pack(">i", len(header)) + header)
        (size,) = struct.unpack(">i", await within(reader.readexactly(4), timeout_s))
        body = await within(reader.readexactly(size), timeout_s)
    finally:
        writer.close()
    _correlation, error, count = struct.unpack_from(">ihi", body)
    if error:
        raise OSError(f"ApiVersions answered error {error}")
    entries = (struct.unpack_from(">hhh", body, 10 + 6 * i) for i in range(count))
    return {key: hi for key, _lo, hi in entries}
