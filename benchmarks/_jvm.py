"""The Java contenders: Kafka Streams (``java/PassThrough.java``; the state benchmark's
windowed count ``java/WindowCount.java``, the join benchmark's KStream-KTable join
``java/JoinRun.java`` and the regroup benchmark's ``groupBy().count()``
``java/RegroupCount.java``, with PassThrough's settings) and Kafka's own
``TransactionalMessageCopier`` (``java/CopierRun.java``), each with ``java/Bench.java``.

``JavaContender.prepare()`` resolves the contender's jars with Maven, the way the test kit
resolves the broker (``eosflow.testing._genuine_jars``), into ``<cache>/<name>/libs``
(the cache: ``~/.cache/eosflow/kafka`` or ``EOSFLOW_TEST_KAFKA_CACHE``), once; then
compiles its sources with ``javac`` into ``classes-<hash of sources and version>`` beside
them (again once). If Maven cannot resolve the version and a fallback is given, that
version is used instead and ``version`` says which. ``command(...)`` is one run's
``java`` command line: a fixed heap of ``HEAP_MB`` (``-Xms`` = ``-Xmx``), Kafka's JVM flags,
logs at WARN.

Each processes a warm-up topic in the same JVM before the timed run (``WARM_RECORDS``), so
the JIT has compiled their paths when the clock starts, as in a service that has been up.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks._budget import Budget
from benchmarks._ceiling import tools_deps
from eosflow.testing._genuine_jars import (
    GenuineUnavailable,
    coordinates,
    locked,
    resolve_artifacts,
)
from eosflow.testing._genuine_procs import java_command

JAVA = Path(__file__).parent / "java"
HEAP_MB = 512  # fixed (-Xms too): a pass-through keeps no state; the window count's is in
# RocksDB (off the heap) but for its 10 MiB record cache and a suppression buffer of a window
# per key
WARM_RECORDS = 200_000
"""Records a Java contender copies in its own JVM before the timed copy (a warm-up run of
its own group): C2 compiles a method after ~10,000 calls, and a cold Kafka Streams spent
most of a 200,000-record run warming up."""

Deps = Callable[[str], list[tuple[str, str, str]]]


def _streams_deps(version: str) -> list[tuple[str, str, str]]:
    return [
        ("org.apache.kafka", "kafka-streams", version),
        ("org.apache.kafka", "kafka-clients", version),
        *coordinates(version)[1:],  # the broker's log binding
    ]


def _say(msg: str) -> None:
    print(f"java contenders: {msg}", file=sys.stderr, flush=True)


class JavaContender:
    def __init__(
        self,
        name: str,
        cache: str,
        deps: Deps,
        main: str,
        version: str,
        fallback: str | None = None,
        uses: tuple[str, ...] = (),
    ) -> None:
        """``uses``: further sources of ``java/`` the main class needs."""
        self.name, self._cache, self._deps, self.main = name, cache, deps, main
        self.sources = [JAVA / "Bench.java", JAVA / f"{main}.java", *(JAVA / u for u in uses)]
        self.wanted, self.fallback = version, fallback
        self.version = version  # the version in use, after prepare()
        self._libs: Path | None = None
        self._classes: Path | None = None

    def prepare(self) -> None:
        """Resolve the jars (falling back if the wanted version does not resolve) and
        compile the classes; blocking, seconds the first time, instant after."""
        try:
            self._libs = self._resolve(self.wanted)
        except GenuineUnavailable as exc:
            if self.fallback is None or self.fallback == self.wanted:
                raise
            first = str(exc).splitlines()[0].rstrip(":")
            _say(
                f"{self.name} {self.wanted} did not resolve ({first}); "
                f"using {self.fallback} instead"
            )
            self.version = self.fallback
            self._libs = self._resolve(self.fallback)
        self._classes = self._compile(self._libs)

    def _resolve(self, version: str) -> Path:
        what = f"{self.name} {version}"
        expect = f"kafka-{self._cache}-"  # kafka-streams-..., kafka-tools-...
        return resolve_artifacts(f"{self._cache}-{version}", self._deps(version), what, expect)

    def _compile(self, libs: Path) -> Path:
        return compile_sources(self.sources, libs, self.main, f"{self.name} {self.version}")

    def command(self, *args: str) -> list[str]:
        """The ``java`` command of one run (``prepare()`` first)."""
        if self._libs is None or self._classes is None:
            raise RuntimeError(f"prepare() the {self.name} contender first")
        cmd = java_command(
            self._libs,
            self._libs.parent,
            self.main,
            *args,
            heap_mb=HEAP_MB,
            log4j1=False,
            level="WARN",
            classes=self._classes,
        )
        return [cmd[0], f"-Xms{HEAP_MB}m", *cmd[1:]]


def compile_sources(sources: list[Path], libs: Path, main: str, against: str) -> Path:
    """``sources`` compiled with ``javac`` against the jars of ``libs`` into
    ``classes-<hash of the sources and against>`` beside ``libs`` (once, under its lock);
    the folder of ``main``'s classes. ``against`` names the jars in the line said while
    compiling (and goes into the hash: other jars, other classes)."""
    javac = shutil.which("javac")
    if javac is None:
        raise GenuineUnavailable("javac not found on PATH (a JDK is needed)")
    digest = hashlib.sha256(against.encode())
    for source in sources:
        digest.update(source.read_bytes())
    classes = libs.parent / f"classes-{digest.hexdigest()[:12]}"
    if (classes / f"{main}.class").exists():
        return classes
    with locked(libs.parent / "lock"):
        if (classes / f"{main}.class").exists():
            return classes
        _say(f"compiling {main}.java against {against}")
        staging = Path(tempfile.mkdtemp(prefix="classes-tmp-", dir=libs.parent))
        done = subprocess.run(
            [javac, "-nowarn", "-d", str(staging), "-cp", f"{libs}/*", *map(str, sources)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise GenuineUnavailable(f"javac failed:\n{done.stdout}{done.stderr}")
        staging.rename(classes)
    return classes


def kafka_streams(version: str, fallback: str | None = None) -> JavaContender:
    return JavaContender(
        "Kafka Streams", "streams", _streams_deps, "PassThrough", version, fallback
    )


def kafka_streams_window(version: str, fallback: str | None = None) -> JavaContender:
    """The state benchmark's windowed count in Kafka Streams, with PassThrough's settings."""
    return JavaContender(
        "Kafka Streams",
        "streams",
        _streams_deps,
        "WindowCount",
        version,
        fallback,
        uses=("PassThrough.java",),
    )


def kafka_streams_join(version: str, fallback: str | None = None) -> JavaContender:
    """The join benchmark's KStream-KTable join in Kafka Streams, PassThrough's settings."""
    return JavaContender(
        "Kafka Streams",
        "streams",
        _streams_deps,
        "JoinRun",
        version,
        fallback,
        uses=("PassThrough.java",),
    )


def join_args(
    boot: str,
    topics: tuple[str, str, str],
    records: int,
    group: str,
    state_dir: str,
    interval_s: float,
    warm: tuple[str, str, str, int],
) -> list[str]:
    """``JoinRun``'s arguments: the run (orders, customers, output), the commit interval
    (ms), the warm-up's topics and order count."""
    return [
        *(boot, *topics, str(records), group, state_dir, str(round(interval_s * 1000))),
        *(warm[0], warm[1], warm[2], str(warm[3])),
    ]


def kafka_streams_regroup(version: str, fallback: str | None = None) -> JavaContender:
    """The regroup benchmark's ``groupBy(...).count()`` in Kafka Streams, PassThrough's
    settings."""
    return JavaContender(
        "Kafka Streams",
        "streams",
        _streams_deps,
        "RegroupCount",
        version,
        fallback,
        uses=("PassThrough.java",),
    )


def regroup_args(
    boot: str,
    topics: tuple[str, str],
    records: int,
    group: str,
    state_dir: str,
    interval_s: float,
    warm: tuple[str, str, int],
) -> list[str]:
    """``RegroupCount``'s arguments: the run, the commit interval (ms), the warm-up's
    topics and record count."""
    return [
        *(boot, *topics, str(records), group, state_dir, str(round(interval_s * 1000))),
        *(warm[0], warm[1], str(warm[2])),
    ]


def kafka_copier(version: str) -> JavaContender:
    """Kafka's TransactionalMessageCopier, from the jars of ``_ceiling``'s tools."""
    return JavaContender("Kafka's tools", "tools", tools_deps, "CopierRun", version)


def streams_args(
    boot: str,
    src: str,
    dst: str,
    records: int,
    group: str,
    work_rounds: int,
    state_dir: Path,
    budget: Budget,
    warm: tuple[str, str, int],
    extra: list[str],
) -> list[str]:
    """``PassThrough``'s arguments: the run, the budget (ms, records, bytes with 0 for
    none), the warm-up topics and count, further Streams settings."""
    return [
        *(boot, src, dst, str(records), group, str(work_rounds), str(state_dir)),
        str(round(budget.interval_s * 1000)),
        str(budget.records),
        str(budget.bytes or 0),
        str(round(budget.min_txn_s * 1000)),
        *(warm[0], warm[1], str(warm[2])),
        *extra,
    ]


def copier_args(
    boot: str, src: str, dst: str, records: int, group: str, budget: Budget,
    warm: tuple[str, str, int],
) -> list[str]:  # fmt: skip
    """``CopierRun``'s arguments: the copier takes the budget's record cap only."""
    return [boot, src, dst, str(records), group, str(budget.records), *map(str, warm)]


def window_args(
    boot: str,
    topics: tuple[str, str],
    records: int,
    group: str,
    state_dir: str,
    window: tuple[int, int],
    interval_s: float,
    warm: tuple[str, str, int],
) -> list[str]:
    """``WindowCount``'s arguments: the run, the window's size and grace (ms), the commit
    interval (ms), the warm-up topics and count."""
    return [
        *(boot, *topics, str(records), group, state_dir),
        *(str(window[0]), str(window[1]), str(round(interval_s * 1000))),
        *(warm[0], warm[1], str(warm[2])),
    ]
