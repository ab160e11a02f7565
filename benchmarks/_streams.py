"""The Kafka Streams contender: ``java/PassThrough.java`` compiled against Kafka Streams.

``KafkaStreams(version).prepare()`` resolves ``org.apache.kafka:kafka-streams`` and
``kafka-clients`` of ``version`` with their runtime dependencies (and the log binding the
broker of that version uses) with Maven, the way the test kit resolves the broker
(``eosflow.testing._genuine_jars``), into ``<cache>/streams-<version>/libs`` (the cache:
``~/.cache/eosflow/kafka`` or ``EOSFLOW_TEST_KAFKA_CACHE``), once; then compiles
``PassThrough.java`` with ``javac`` into ``classes-<hash of source and version>`` beside it
(again only once per source). If Maven cannot resolve ``version`` and ``fallback`` is
given, that version is used instead and ``version`` says which one it is.
``command(...)`` is the ``java`` command line of one run.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from eosflow.testing._genuine_jars import (
    GenuineUnavailable,
    coordinates,
    locked,
    resolve_artifacts,
)
from eosflow.testing._genuine_procs import java_command

SOURCE = Path(__file__).parent / "java" / "PassThrough.java"
MAIN = "PassThrough"
HEAP_MB = 512  # the Streams JVM's -Xmx (a pass-through keeps no state)


def _say(msg: str) -> None:
    print(f"kafka-streams contender: {msg}", file=sys.stderr, flush=True)


class KafkaStreamsContender:
    def __init__(self, version: str, fallback: str | None = None) -> None:
        self.wanted, self.fallback = version, fallback
        self.version = version  # the version in use, after prepare()
        self._libs: Path | None = None
        self._classes: Path | None = None

    def prepare(self) -> None:
        """Resolve the jars (falling back if the wanted version does not resolve) and
        compile the class; blocking, seconds the first time, instant after."""
        try:
            self._libs = self._resolve(self.wanted)
        except GenuineUnavailable as exc:
            if self.fallback is None or self.fallback == self.wanted:
                raise
            first = str(exc).splitlines()[0].rstrip(":")
            _say(
                f"Kafka Streams {self.wanted} did not resolve ({first}); "
                f"using Kafka Streams {self.fallback} instead"
            )
            self.version = self.fallback
            self._libs = self._resolve(self.fallback)
        self._classes = self._compile(self._libs)

    @staticmethod
    def _resolve(version: str) -> Path:
        deps = [
            ("org.apache.kafka", "kafka-streams", version),
            ("org.apache.kafka", "kafka-clients", version),
            *coordinates(version)[1:],  # the broker's log binding
        ]
        what = f"Kafka Streams {version}"
        return resolve_artifacts(f"streams-{version}", deps, what, "kafka-streams-")

    def _compile(self, libs: Path) -> Path:
        javac = shutil.which("javac")
        if javac is None:
            raise GenuineUnavailable("javac not found on PATH (a JDK is needed)")
        digest = hashlib.sha256(SOURCE.read_bytes() + self.version.encode()).hexdigest()[:12]
        classes = libs.parent / f"classes-{digest}"
        if (classes / f"{MAIN}.class").exists():
            return classes
        with locked(libs.parent / "lock"):
            if (classes / f"{MAIN}.class").exists():
                return classes
            _say(f"compiling {SOURCE.name} against Kafka Streams {self.version}")
            staging = Path(tempfile.mkdtemp(prefix="classes-tmp-", dir=libs.parent))
            done = subprocess.run(
                [javac, "-nowarn", "-d", str(staging), "-cp", f"{libs}/*", str(SOURCE)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                shutil.rmtree(staging, ignore_errors=True)
                raise GenuineUnavailable(f"javac failed:\n{done.stdout}{done.stderr}")
            staging.rename(classes)
        return classes

    def command(
        self,
        boot: str,
        src: str,
        dst: str,
        records: int,
        interval_s: float,
        group: str,
        work_rounds: int,
        state_dir: Path,
    ) -> list[str]:
        """The ``java`` command of one run (``prepare()`` first); logs at WARN."""
        if self._libs is None or self._classes is None:
            raise RuntimeError("prepare() the Kafka Streams contender first")
        args = [boot, src, dst, str(records), str(round(interval_s * 1000)), group]
        args += [str(work_rounds), str(state_dir)]
        return java_command(
            self._libs,
            self._libs.parent,
            MAIN,
            *args,
            heap_mb=HEAP_MB,
            log4j1=False,
            level="WARN",
            classes=self._classes,
        )
