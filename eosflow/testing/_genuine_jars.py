"""The official Apache Kafka jars, resolved once with Maven into a cache.

``resolve(version)`` returns ``<cache>/<version>/libs/`` holding ``kafka_2.13:<version>``
with its runtime dependencies (ZooKeeper's among them before Kafka 3) and an SLF4J binding
so the broker logs. The cache is ``~/.cache/eosflow/kafka`` unless
``EOSFLOW_TEST_KAFKA_CACHE`` names another folder. A ``complete`` marker is written only
after Maven succeeded and the jars were moved into place, so an interrupted download is
redone; a lock file keeps two processes from resolving the same version at once. Progress
goes to stderr. ``resolve_artifacts`` resolves other artifacts the same way (the
benchmarks' Kafka Streams contender and Kafka's perf tools).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ENV_CACHE = "EOSFLOW_TEST_KAFKA_CACHE"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>eosflow.testing</groupId>
  <artifactId>kafka-broker-libs</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""

_DEP = """    <dependency>
      <groupId>{0}</groupId><artifactId>{1}</artifactId><version>{2}</version>
    </dependency>"""


class GenuineUnavailable(Exception):
    """Java or Maven is missing, or the jars could not be resolved: genuine Kafka cannot
    run on this machine (a test outside CI may skip on it; CI fails)."""


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def uses_zookeeper(version: str) -> bool:
    """Kafka before 3 runs only with ZooKeeper; from 4 only with KRaft (3.x: ZooKeeper)."""
    return version_tuple(version) < (4,)


def coordinates(version: str) -> list[tuple[str, str, str]]:
    """The Maven artifacts for a broker of ``version``: Kafka's core (``kafka.Kafka`` and
    ``kafka.tools.StorageTool`` live there; its pom brings kafka-server, -metadata, -raft,
    the coordinators, and ZooKeeper before Kafka 3) plus the log binding its distribution
    ships (log4j 2 from Kafka 4, log4j 1.2 before)."""
    deps = [("org.apache.kafka", "kafka_2.13", version)]
    if uses_zookeeper(version):
        deps += [("log4j", "log4j", "1.2.17"), ("org.slf4j", "slf4j-log4j12", "1.7.30")]
    else:
        deps += [("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3")]
    return deps


def cache_root() -> Path:
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "eosflow" / "kafka"


def _say(msg: str) -> None:
    print(f"eosflow genuine kafka: {msg}", file=sys.stderr, flush=True)


def check_tools() -> tuple[str, str]:
    """The paths of ``java`` and ``mvn``, or ``GenuineUnavailable`` naming what is missing."""
    java, mvn = shutil.which("java"), shutil.which("mvn")
    missing = [name for name, path in (("java", java), ("mvn", mvn)) if path is None]
    if java is None or mvn is None:
        raise GenuineUnavailable(f"{' and '.join(missing)} not found on PATH")
    return java, mvn


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"waiting for another process resolving into {path.parent}")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def resolve(version: str) -> Path:
    """The folder of jars for ``version``, resolving them with Maven the first time."""
    _, mvn = check_tools()
    home = cache_root() / version
    libs, marker = home / "libs", home / "complete"
    if marker.exists():
        return libs
    with locked(home / "lock"):
        if marker.exists():  # another process finished while we waited
            return libs
        _download(mvn, version, home)
    return libs


def resolve_artifacts(name: str, deps: list[tuple[str, str, str]], what: str, expect: str) -> Path:
    """The folder of jars of ``deps`` with their runtime dependencies, cached under
    ``<cache>/<name>/libs`` and resolved with Maven the first time (the benchmarks' Kafka
    Streams contender and Kafka's own perf tools). ``GenuineUnavailable`` if they do not
    resolve."""
    _, mvn = check_tools()
    home = cache_root() / name
    libs = home / "libs"
    if (home / "complete").exists():
        return libs
    with locked(home / "lock"):
        if not (home / "complete").exists():  # another process may have finished meanwhile
            copy_dependencies(mvn, deps, home, what, expect)
    return libs


def _download(mvn: str, version: str, home: Path) -> None:
    copy_dependencies(mvn, coordinates(version), home, f"Kafka {version}", "kafka_")


def copy_dependencies(
    mvn: str, deps: list[tuple[str, str, str]], home: Path, what: str, expect: str
) -> None:
    """Resolve ``deps`` (group, artifact, version) with their runtime dependencies into
    ``home/libs`` with a generated pom and ``mvn dependency:copy-dependencies``; then write
    the ``complete`` marker. ``expect``: the name prefix of a jar that must be among them.
    Call it holding ``home/lock`` (``locked``) after checking the marker."""
    libs = home / "libs"
    for old in [libs, *home.glob("libs-*")]:  # left by an interrupted run
        shutil.rmtree(old, ignore_errors=True)
    pom = home / "pom.xml"
    pom.write_text(
        _POM.format(version=deps[0][2], dependencies="\n".join(_DEP.format(*d) for d in deps))
    )
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=home))
    log = home / "mvn.log"
    names = ", ".join(":".join(d) for d in deps)
    _say(f"resolving {names} with Maven into {libs} (once; later runs reuse it)")
    start = time.monotonic()
    cmd = [mvn, "-B", "-f", str(pom), "dependency:copy-dependencies"]
    cmd += [f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    returncode = run_maven(cmd, home, log, _say, "resolving")
    elapsed = time.monotonic() - start
    text = log.read_text(errors="replace")
    jars = sorted(staging.glob("*.jar"))
    if returncode != 0 or not any(j.name.startswith(expect) for j in jars):
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join([line for line in text.splitlines() if "ERROR" in line][-15:])
        raise GenuineUnavailable(
            f"Maven could not resolve {what} (exit {returncode}, log {log}):\n{tail}"
        )
    size = sum(j.stat().st_size for j in jars)
    staging.rename(libs)
    downloaded = _downloaded_bytes(text)
    info = {"version": deps[0][2], "jars": len(jars), "bytes": size, "seconds": round(elapsed, 1)}
    info["downloaded_bytes"] = downloaded
    (home / "complete").write_text(json.dumps(info) + "\n")
    _say(
        f"{what}: {len(jars)} jars, {size / 1e6:.1f} MB in {elapsed:.1f} s "
        f"({downloaded / 1e6:.1f} MB downloaded by Maven, the rest from its local repository)"
    )


def run_maven(cmd: list[str], cwd: Path, log: Path, say: Callable[[str], None], doing: str) -> int:
    """Run Maven (``cmd``) in ``cwd``, its output into ``log``, saying every 10 s how
    long it has been ``doing`` and how many files it downloaded; its exit code. An
    interruption (^C, a test's timeout) stops Maven too."""
    start = last = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd
        )
        try:
            while proc.poll() is None:
                time.sleep(0.2)
                if time.monotonic() - last >= 10:
                    last = time.monotonic()
                    done = log.read_text(errors="replace").count("Downloaded from")
                    say(f"still {doing}: {last - start:.0f} s, {done} files downloaded")
        finally:
            if proc.poll() is None:  # interrupted: Maven goes too
                proc.kill()
                proc.wait()
    return proc.returncode


def _downloaded_bytes(mvn_output: str) -> int:
    """What Maven fetched, from its 'Downloaded from ...: URL (123 kB at ...)' lines."""
    total = 0.0
    units = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    for line in mvn_output.splitlines():
        if "Downloaded from" not in line or "(" not in line:
            continue
        amount = line.rsplit("(", 1)[1].split(" at ")[0].split()
        if len(amount) == 2 and amount[1] in units:
            with contextlib.suppress(ValueError):
                total += float(amount[0]) * units[amount[1]]
    return int(total)
