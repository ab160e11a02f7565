"""A genuine schema registry for tests, built once with Maven and started as genuine Kafka is.

``SchemaRegistry`` runs **Apicurio Registry 2.4.2.Final** -- its Confluent-compatible API
under ``/apis/ccompat/v7``, in-memory storage -- on 127.0.0.1 and a port the OS picks
(``-Dquarkus.http.port=0``; the log names it), stopped by pid (``_genuine_procs``):

    async with SchemaRegistry() as reg:
        reg.url  # http://127.0.0.1:41234/apis/ccompat/v7

``build()`` writes a small Maven project (the strings below: the package ships no data
files) into ``~/.cache/eosflow/registry/apicurio-2.4.2.Final`` (``EOSFLOW_TEST_REGISTRY_CACHE``
names another root) and runs ``mvn package`` there once, under a lock; only the runner
jar and its ``lib/`` are kept, and a ``complete`` marker says they are whole.

Why built so: ``apicurio-registry-app`` on Maven Central is a library jar (no runner, no
main class), so the pom re-runs Quarkus' build (``quarkus-maven-plugin`` 2.16.4.Final,
the app's own ``legacy-jar``) with every repository mirrored to Central;
``org.everit.json.schema`` (on jitpack, not served) is replaced by the same library from
Central (``com.github.erosb:everit-json-schema`` 1.14.2), and the one bean of
``apicurio-common-app-components-config-index-deployment`` (not served) by
``ConfigIndexShim`` (no runtime-editable properties: the only behaviour it changes).
3.x needs Java 21 and artifacts Central's mirror refuses; 2.5 and 2.6 miss some too.

Where it differs from Confluent's registry: global compatibility defaults to NONE (so it
is set to ``compatibility``, BACKWARD unless told); an incompatible version is refused
with 409 (``error_code`` 0); no ``/mode``, ``/schemas``, ``/schemas/ids/{id}/schema``; a
lookup of a schema differing only in whitespace needs ``normalize=true``; a Protobuf
schema registered as a base64 descriptor breaks the next compatibility check (``.proto``
text works); authentication is OIDC only. docs/design.md has the details.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from . import _genuine_procs as procs
from ._genuine import GenuineStartError
from ._genuine_jars import GenuineUnavailable, check_tools, locked, run_maven

__all__ = ["APICURIO_VERSION", "SchemaRegistry", "build", "cache_root", "call"]

APICURIO_VERSION = "2.4.2.Final"
ENV_CACHE = "EOSFLOW_TEST_REGISTRY_CACHE"
CCOMPAT = "/apis/ccompat/v7"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# Confluent's compatibility levels (Apicurio's global rule takes the same names)
LEVELS = tuple(f"{k}{t}" for k in ("BACKWARD", "FORWARD", "FULL") for t in ("", "_TRANSITIVE"))
LEVELS = ("NONE", *LEVELS)
RUNNER = "eosflow-registry-1-runner.jar"
_LISTENING = re.compile(r"Listening on: (https?://127\.0\.0\.1:\d+)")

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>eosflow.testing</groupId>
  <artifactId>eosflow-registry</artifactId>
  <version>1</version>
  <properties>
    <apicurio.version>{version}</apicurio.version>
    <quarkus.version>2.16.4.Final</quarkus.version>
    <maven.compiler.source>17</maven.compiler.source>
    <maven.compiler.target>17</maven.compiler.target>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>io.apicurio</groupId><artifactId>apicurio-registry</artifactId>
        <version>${{apicurio.version}}</version><type>pom</type><scope>import</scope>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>io.apicurio</groupId><artifactId>apicurio-registry-app</artifactId>
      <version>${{apicurio.version}}</version>
      <exclusions>
        <exclusion>
          <groupId>io.apicurio</groupId>
          <artifactId>apicurio-common-app-components-config-index</artifactId>
        </exclusion>
        <exclusion>
          <groupId>com.github.everit-org.json-schema</groupId>
          <artifactId>org.everit.json.schema</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>com.github.erosb</groupId><artifactId>everit-json-schema</artifactId>
      <version>1.14.2</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>io.quarkus</groupId><artifactId>quarkus-maven-plugin</artifactId>
        <version>${{quarkus.version}}</version>
        <executions><execution><goals><goal>build</goal></goals></execution></executions>
      </plugin>
    </plugins>
  </build>
</project>
"""

_SETTINGS = """<settings><mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>
<url>https://repo.maven.apache.org/maven2</url></mirror></mirrors></settings>
"""

_SHIM = """package eosflow.testing;

import java.util.List;

import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;

/** The bean apicurio-common-app-components-config-index-deployment (not on Maven Central)
 * would produce: no runtime-editable ("dynamic") config properties. */
@ApplicationScoped
public class ConfigIndexShim {
    @Produces
    @ApplicationScoped
    DynamicConfigPropertyList dynamicConfigPropertyList() {
        return new DynamicConfigPropertyList(List.of());
    }
}
"""

# the registry's own jar, a dependency here, indexed as a bean archive (Quarkus does not
# pick up a dependency's beans otherwise)
_APP_PROPERTIES = """quarkus.index-dependency.registry-app.group-id=io.apicurio
quarkus.index-dependency.registry-app.artifact-id=apicurio-registry-app
"""

_PROJECT = {
    "pom.xml": _POM.format(version=APICURIO_VERSION),
    "settings.xml": _SETTINGS,
    "src/main/java/eosflow/testing/ConfigIndexShim.java": _SHIM,
    "src/main/resources/application.properties": _APP_PROPERTIES,
}


def _say(msg: str) -> None:
    print(f"eosflow schema registry: {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "eosflow" / "registry"


def build() -> Path:
    """The runner jar, built with Maven the first time (``<cache>/apicurio-<version>/app``);
    ``GenuineUnavailable`` if Java or Maven is missing or the build fails."""
    _, mvn = check_tools()
    home = cache_root() / f"apicurio-{APICURIO_VERSION}"
    jar = home / "app" / RUNNER
    if (home / "complete").exists():
        return jar
    with locked(home / "lock"):
        if not (home / "complete").exists():  # another process may have finished meanwhile
            _build(mvn, home)
    return jar


def _build(mvn: str, home: Path) -> None:
    for old in [home / "app", *home.glob("build-*")]:  # left by an interrupted run
        shutil.rmtree(old, ignore_errors=True)
    project = Path(tempfile.mkdtemp(prefix="build-", dir=home))
    for rel, text in _PROJECT.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    log = home / "mvn.log"
    _say(f"building Apicurio Registry {APICURIO_VERSION} with Maven in {home} (once)")
    start = time.monotonic()
    cmd = [mvn, "-B", "-s", "settings.xml", "package", "-DskipTests"]
    returncode = run_maven(cmd, project, log, _say, "building")
    elapsed = time.monotonic() - start
    target = project / "target"
    runners = sorted(target.glob("*-runner.jar"))
    if returncode != 0 or not runners or not (target / "lib").is_dir():
        shutil.rmtree(project, ignore_errors=True)
        text = log.read_text(errors="replace")
        errors = "\n".join([line for line in text.splitlines() if "ERROR" in line][-15:])
        raise GenuineUnavailable(
            f"Maven could not build Apicurio Registry {APICURIO_VERSION} "
            f"(exit {returncode}, log {log}):\n{errors}"
        )
    app = project / "app"
    app.mkdir()
    (target / "lib").rename(app / "lib")
    runners[0].rename(app / RUNNER)
    app.rename(home / "app")
    shutil.rmtree(project, ignore_errors=True)
    size = sum(f.stat().st_size for f in (home / "app").rglob("*") if f.is_file())
    info = {"version": APICURIO_VERSION, "bytes": size, "seconds": round(elapsed, 1)}
    (home / "complete").write_text(json.dumps(info) + "\n")
    _say(f"built in {elapsed:.1f} s: {size / 1e6:.1f} MB in {home / 'app'}")


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy on loopback


def call(
    method: str,
    url: str,
    body: Any = None,
    timeout_s: float = 5.0,
    context: ssl.SSLContext | None = None,
) -> tuple[int, Any]:
    """One HTTP request to the registry: the status and the decoded JSON answer (None when
    empty). ``body`` is sent as JSON; ``context``: TLS settings of an https URL.
    Connection errors raise ``OSError``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", CONTENT_TYPE)
    request.add_header("Accept", "application/json")
    try:
        opener = _DIRECT
        if context is not None:
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
            )
        with opener.open(request, timeout=timeout_s) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw.strip() else None
    except ValueError:
        return status, raw.decode(errors="replace")


@dataclass(frozen=True)
class RegistryTls:
    """HTTPS for the registry: its ``certificate`` (PEM, the chain), its ``key`` (PEM),
    and the ``ca`` (PEM) that signed it, which the readiness checks trust."""

    certificate: Path
    key: Path
    ca: Path


class SchemaRegistry:
    """A genuine schema registry (Apicurio Registry 2.4.2.Final) from ``start()`` (or
    entering the context) to ``stop()``; ``url`` is its Confluent-compatible API.

    ``compatibility`` is set as the global default (Confluent's is BACKWARD; ``"NONE"``
    keeps Apicurio's). ``start()`` builds the registry the first time (see ``build``),
    then waits up to ``start_timeout_s`` for it to answer; ``GenuineUnavailable`` if it
    cannot run here, ``GenuineStartError`` with the log's tail if it did not start.
    Start it from a long-lived thread (the event loop's, or use ``start_sync``): the
    process is SIGKILLed when the thread that started it ends."""

    def __init__(
        self,
        *,
        compatibility: str = "BACKWARD",
        heap_mb: int = 256,
        start_timeout_s: float = 120.0,
        tls: RegistryTls | None = None,
    ) -> None:
        if compatibility.upper() not in LEVELS:
            raise ValueError(f"compatibility {compatibility!r} is none of {', '.join(LEVELS)}")
        self.compatibility = compatibility.upper()
        self.heap_mb, self.start_timeout_s = heap_mb, start_timeout_s
        self.tls = tls
        self._context = None if tls is None else ssl.create_default_context(cafile=str(tls.ca))
        self.url = ""  # http://127.0.0.1:<port>/apis/ccompat/v7, once started
        self.started_in_s = 0.0  # from the process' start to its first answer
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._began = self._deadline = 0.0
        self._base = ""

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def log_path(self) -> Path:
        """The registry's output (removed with its temp folder at ``stop()``)."""
        if self._dir is None:
            raise RuntimeError("the schema registry is not started")
        return self._dir / "registry.log"

    async def __aenter__(self) -> SchemaRegistry:
        await self.start()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        self._spawn(await asyncio.to_thread(build))
        try:
            while True:
                if await asyncio.to_thread(self._ready):
                    return
                await asyncio.sleep(0.2)
        except BaseException as exc:
            self._abort(exc)
            raise

    def start_sync(self) -> None:
        """``start()`` for a caller without an event loop (a session fixture)."""
        self._spawn(build())
        try:
            while not self._ready():
                time.sleep(0.2)
        except BaseException as exc:
            self._abort(exc)
            raise

    def _spawn(self, jar: Path) -> None:
        if self._proc is not None:
            raise RuntimeError("the schema registry is already started")
        java, _ = check_tools()
        self._dir = procs.make_home("eosflow-registry-")
        (self._dir / "tmp").mkdir()
        cmd = [java, f"-Xmx{self.heap_mb}m", f"-Djava.io.tmpdir={self._dir / 'tmp'}"]
        cmd += ["-Dquarkus.http.host=127.0.0.1", "-Dquarkus.http.port=0"]
        if self.tls is not None:  # HTTPS only, on a port the OS picks
            cmd += [
                "-Dquarkus.http.ssl-port=0",
                "-Dquarkus.http.insecure-requests=disabled",
                f"-Dquarkus.http.ssl.certificate.files={self.tls.certificate}",
                f"-Dquarkus.http.ssl.certificate.key-files={self.tls.key}",
            ]
        if self.compatibility != "NONE":
            cmd += [f"-Dregistry.rules.global.compatibility={self.compatibility}"]
        self._began = time.monotonic()
        self._deadline = self._began + self.start_timeout_s
        self._base = self.url = ""
        self._proc = procs.spawn([*cmd, "-jar", str(jar)], self.log_path, self._dir)

    def _ready(self) -> bool:
        """One look: the port in the log, then ``GET /subjects`` answering 200; once it
        does, the global compatibility is set. Raises if the process died or time is up."""
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise GenuineStartError(
                f"the schema registry exited (code {self._proc.returncode}) while starting; "
                f"log {self.log_path}:\n{procs.tail(self.log_path, 40)}"
            )
        if time.monotonic() > self._deadline:
            raise GenuineStartError(
                f"the schema registry did not answer within {self.start_timeout_s:.0f} s; "
                f"log {self.log_path}:\n{procs.tail(self.log_path, 40)}"
            )
        if not self._base:
            found = _LISTENING.search(self.log_path.read_text(errors="replace"))
            if found is None:
                return False
            self._base = found.group(1)
        url = self._base + CCOMPAT
        try:
            status, _ = call("GET", f"{url}/subjects", context=self._context)
        except OSError:
            return False
        if status != 200:
            return False
        if self.compatibility != "NONE":  # the property enforces it; this makes GET /config say so
            status, answer = call(
                "PUT", f"{url}/config", {"compatibility": self.compatibility}, context=self._context
            )
            if status != 200:
                raise GenuineStartError(f"PUT {url}/config answered {status}: {answer}")
        self.url, self.started_in_s = url, time.monotonic() - self._began
        return True

    def _abort(self, exc: BaseException) -> None:
        """After a failed start: stop the process; keep the folder (the log) if it failed
        to start, remove it if the start was interrupted."""
        if self._proc is not None:
            procs.terminate(self._proc, grace_s=5.0)
            self._proc = None
        if not isinstance(exc, GenuineStartError) and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_sync)

    def stop_sync(self, grace_s: float = 20.0) -> None:
        """SIGTERM by pid, SIGKILL if still running after ``grace_s``; the temp folder
        removed. Nothing happens if it is not running."""
        if self._proc is not None:
            procs.terminate(self._proc, grace_s)
            self._proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
