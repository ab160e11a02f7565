"""Genuine Apache Kafka brokers from the official jars, for tests.

``GenuineKafka`` runs ``java -cp 'libs/*' kafka.Kafka server.properties`` for each broker
on 127.0.0.1 and free ports, with the jars ``_genuine_jars.resolve`` fetched once with
Maven. From Kafka 4 each broker is a combined broker+controller of one static KRaft
quorum (``controller.quorum.voters``; storage formatted first with ``kafka.tools.
StorageTool format`` and a fresh cluster id). Before Kafka 4 the brokers register with a
ZooKeeper started from the same jars (``OLD_VERSION`` is the last broker without
KIP-447). Data and logs live in a temp folder removed on a clean stop, kept and named in
the error when the start failed. Processes are stopped by pid (``_genuine_procs``).

    async with GenuineKafka("4.4.0", brokers=3) as k:
        k.bootstrap_servers; k.kill(2); await k.restart(2); k.log_tail(50)

What a test adds to every broker beyond ``config`` -- listeners of other security
protocols, the files they need, Java system properties, arguments to the storage
format -- comes through one seam: ``prepare``, a function called once per start with a
folder of the cluster's, answering ``BrokerAddons``. eosflow's own secured broker
(TLS, SASL, mutual TLS, ACLs: the project's tests, outside the package) plugs in there.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from . import _genuine_procs as procs
from ._genuine_jars import GenuineUnavailable, check_tools, resolve, uses_zookeeper

__all__ = [
    "DEFAULT_VERSION",
    "OLD_VERSION",
    "BrokerAddons",
    "GenuineKafka",
    "GenuineStartError",
    "GenuineUnavailable",
]

DEFAULT_VERSION = "4.4.0"  # the newest Kafka on Maven Central, verified here
OLD_VERSION = "2.4.1"  # the last release without KIP-447 (TxnOffsetCommit v3)
MIN_SESSION_TIMEOUT_MS = 500  # group.min.session.timeout.ms (Kafka's default: 6000)
TXN_SWEEP_MS = 1000  # transaction.abort.timed.out.transaction.cleanup.interval.ms (10000)
# log.retention.check.interval.ms (300000), as the test cluster's: a test whose records are
# stamped older than retention.ms (7 days; 1970's ms 0) loses them within a second, not
# at some check minutes into a long run. The first check stays 30 s after start.
RETENTION_CHECK_MS = 1000


class GenuineStartError(RuntimeError):
    """A broker (or its ZooKeeper, or the schema registry) did not start; the message has
    the log's tail."""


@dataclass(frozen=True)
class BrokerAddons:
    """What ``GenuineKafka(prepare=...)``'s function adds to every broker (KRaft only
    when it adds listeners or format arguments):

    - ``listeners``: more listeners, name -> security protocol (``{"TLS": "SSL"}``): each
      gets a free port on every broker, added to ``listeners``, ``advertised.listeners``
      and ``listener.security.protocol.map``; ``listener_servers(name)`` lists them. The
      brokers keep talking to each other over PLAINTEXT;
    - ``properties``: server properties (``config`` still has the last word);
    - ``jvm_properties``: Java system properties (``-Dkey=value``) of every Java process
      the cluster starts;
    - ``format_args``: arguments added to ``kafka.tools.StorageTool format`` (e.g.
      ``--add-scram``)."""

    listeners: Mapping[str, str] = field(default_factory=dict)
    properties: Mapping[str, str] = field(default_factory=dict)
    jvm_properties: Mapping[str, str] = field(default_factory=dict)
    format_args: tuple[str, ...] = ()


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    home: Path
    proc: subprocess.Popen[bytes] | None = None
    stopped: bool = False  # SIGSTOPped
    listener_ports: dict[str, int] = field(default_factory=dict)  # BrokerAddons.listeners

    @property
    def log(self) -> Path:
        return self.home / "server.log"


class GenuineKafka:
    """``brokers`` brokers of Kafka ``version``, from ``start()`` (or entering the
    context) to ``stop()``. ``config`` overrides or adds broker properties. ``prepare``,
    when given, is called once in ``start()`` (in a worker thread) with a folder of the
    cluster's for its files -- removed at ``stop()`` -- before any broker is formatted
    or started; the ``BrokerAddons`` it answers go into every broker."""

    def __init__(
        self,
        version: str = DEFAULT_VERSION,
        brokers: int = 1,
        *,
        auto_create_topics: bool = True,
        default_partitions: int = 1,
        heap_mb: int = 512,
        start_timeout_s: float = 180.0,
        config: Mapping[str, str] | None = None,
        features: Mapping[str, int] | None = None,
        prepare: Callable[[Path], BrokerAddons] | None = None,
    ) -> None:
        self.version, self.brokers = version, brokers
        self.prepare = prepare
        self.addons = BrokerAddons()  # prepare's answer, once started
        self.auto_create_topics, self.default_partitions = auto_create_topics, default_partitions
        self.heap_mb, self.start_timeout_s = heap_mb, start_timeout_s
        self.config = dict(config or {})
        # KRaft only: feature levels set when the storage is formatted (StorageTool
        # --feature, Kafka 3.8+), e.g. {"group.version": 0, "transaction.version": 0} for
        # a 4.x cluster with neither the consumer group protocol nor transactions v2
        self.features = dict(features or {})
        self.zookeeper = uses_zookeeper(version)
        self.started_in_s = 0.0  # from the jars at hand to every broker answering
        self._dir: Path | None = None
        self._libs: Path | None = None
        self._nodes: dict[int, _Node] = {}
        self._zk: subprocess.Popen[bytes] | None = None
        self._zk_port = 0

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self._nodes.values())

    def listener_servers(self, listener: str) -> str:
        """The bootstrap servers of one of ``BrokerAddons.listeners``, by its name."""
        if listener not in self.addons.listeners:
            raise KeyError(f"no listener {listener!r}; added: {sorted(self.addons.listeners)}")
        return ",".join(f"127.0.0.1:{n.listener_ports[listener]}" for n in self._nodes.values())

    @property
    def node_ids(self) -> list[int]:
        return list(self._nodes)

    @property
    def log_paths(self) -> dict[int, Path]:
        """Each broker's log by node id; ZooKeeper's (if any) under 0."""
        paths = {i: n.log for i, n in self._nodes.items()}
        if self._dir is not None and self.zookeeper:
            paths[0] = self._dir / "zookeeper.log"
        return paths

    @property
    def log_path(self) -> Path:
        """The first broker's log (``log_paths`` has every node's)."""
        return next(iter(self._nodes.values())).log

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of each broker's log (and ZooKeeper's), labelled."""
        return "\n".join(
            f"--- {p} (last {n} lines) ---\n{procs.tail(p, n)}" for p in self.log_paths.values()
        )

    def settings(self, node: int) -> dict[str, str]:
        """Broker ``node``'s server.properties: replication to match the cluster size
        (3 brokers: RF 3, min ISR 2), test timings, the addons, then ``config``."""
        n = self._nodes[node]
        rf, min_isr = min(3, self.brokers), 2 if self.brokers >= 3 else 1
        props = {
            "listeners": f"PLAINTEXT://127.0.0.1:{n.port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{n.port}",
            "log.dirs": str(n.home / "data"),
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min_isr),
            "transaction.state.log.num.partitions": "5",
            "default.replication.factor": str(rf),
            "min.insync.replicas": str(min_isr),
            "num.partitions": str(self.default_partitions),
            "auto.create.topics.enable": str(self.auto_create_topics).lower(),
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": str(MIN_SESSION_TIMEOUT_MS),
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(TXN_SWEEP_MS),
            "log.retention.check.interval.ms": str(RETENTION_CHECK_MS),
        }
        if not self.version.startswith(("0.", "1.", "2.", "3.")):
            # the consumer group protocol's heartbeat and session are the broker's to set
            # (KIP-848): 250 ms and 6 s, as the test cluster's, so tests see a rebalance
            # within a second and a killed member's partitions move within seconds
            props["group.consumer.min.heartbeat.interval.ms"] = "250"
            props["group.consumer.heartbeat.interval.ms"] = "250"
            props["group.consumer.min.session.timeout.ms"] = "1000"
            props["group.consumer.session.timeout.ms"] = "6000"
        if self.zookeeper:
            props["broker.id"] = str(node)
            props["zookeeper.connect"] = f"127.0.0.1:{self._zk_port}"
        else:
            voters = [f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in self._nodes.values()]
            props["listeners"] += f",CONTROLLER://127.0.0.1:{n.controller_port}"
            props.update({
                "process.roles": "broker,controller",
                "node.id": str(node),
                "controller.quorum.voters": ",".join(voters),
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "broker.session.timeout.ms": "4000",  # fence a killed broker sooner (9000)
                "broker.heartbeat.interval.ms": "500",  # (2000)
                "share.coordinator.state.topic.replication.factor": str(rf),
                "share.coordinator.state.topic.min.isr": str(min_isr),
            })  # fmt: skip
        if n.listener_ports:
            added = ",".join(f"{name}://127.0.0.1:{p}" for name, p in n.listener_ports.items())
            props["listeners"] += "," + added
            props["advertised.listeners"] += "," + added
            props["listener.security.protocol.map"] += "".join(
                f",{name}:{protocol}" for name, protocol in self.addons.listeners.items()
            )
        props.update(self.addons.properties)
        props.update(self.config)
        return props

    def _java(self, main: str, *args: str, heap_mb: int, level: str = "INFO") -> list[str]:
        assert self._dir is not None and self._libs is not None
        return procs.java_command(
            self._libs,
            self._dir,
            main,
            *args,
            heap_mb=heap_mb,
            log4j1=self.zookeeper,
            level=level,
            system=dict(self.addons.jvm_properties),
        )

    async def __aenter__(self) -> GenuineKafka:
        await self.start()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        check_tools()
        self._libs = await asyncio.to_thread(resolve, self.version)
        began = time.monotonic()
        deadline = began + self.start_timeout_s
        self._dir = procs.make_home(f"eosflow-kafka-{self.version}-")
        try:
            if self.prepare is not None:
                (self._dir / "addons").mkdir()
                self.addons = await asyncio.to_thread(self.prepare, self._dir / "addons")
            if self.zookeeper and (self.addons.listeners or self.addons.format_args):
                raise ValueError("BrokerAddons' listeners and format_args need KRaft")
            extra = len(self.addons.listeners)
            ports = procs.free_ports((2 + extra) * self.brokers + 1)
            for i in range(1, self.brokers + 1):
                home = self._dir / f"node-{i}"
                (home / "data").mkdir(parents=True)
                mine = ports[(2 + extra) * (i - 1) : (2 + extra) * i]
                added = dict(zip(self.addons.listeners, mine[2:], strict=True))
                self._nodes[i] = _Node(i, mine[0], mine[1], home, listener_ports=added)
            if self.zookeeper:
                await self._start_zookeeper(ports[-1], deadline)
            else:
                await self._format()
            for i in self._nodes:
                self._start_node(i)
            await self._wait_ready(list(self._nodes), deadline)
        except BaseException as exc:
            for proc in [n.proc for n in self._nodes.values()] + [self._zk]:
                procs.kill(proc)
            if isinstance(exc, GenuineStartError):
                raise GenuineStartError(f"{exc}\n(logs kept in {self._dir})") from None
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.started_in_s = time.monotonic() - began

    async def _start_zookeeper(self, port: int, deadline: float) -> None:
        assert self._dir is not None
        self._zk_port = port
        conf, log = self._dir / "zookeeper.properties", self._dir / "zookeeper.log"
        conf.write_text(
            f"dataDir={self._dir / 'zookeeper'}\nclientPort={port}\nclientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\nadmin.enableServer=false\n"
        )
        main = "org.apache.zookeeper.server.ZooKeeperServerMain"
        self._zk = procs.spawn(self._java(main, str(conf), heap_mb=128), log, self._dir)
        while not await procs.port_open(port):
            if self._zk.poll() is not None or time.monotonic() > deadline:
                raise GenuineStartError(
                    f"ZooKeeper did not start (exit {self._zk.poll()}):\n{procs.tail(log, 40)}"
                )
            await asyncio.sleep(0.1)

    async def _format(self) -> None:
        """``kafka.tools.StorageTool format`` on every node at once, with one fresh
        cluster id (a static quorum needs no ``--standalone``/``--initial-controllers``)."""
        cluster_id = "-"
        while cluster_id.startswith("-"):  # Kafka's own random ids never start with '-'
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        started = []
        for i, node in self._nodes.items():
            props = str(self._write_properties(i))
            args = ("format", "-c", props, "-t", cluster_id, *self.addons.format_args)
            for name, level in sorted(self.features.items()):
                args += ("--feature", f"{name}={level}")
            cmd = self._java("kafka.tools.StorageTool", *args, heap_mb=256, level="WARN")
            started.append((node, procs.spawn(cmd, node.log, node.home)))
        for node, proc in started:
            code = await asyncio.to_thread(proc.wait)
            procs.forget(proc)
            if code != 0:
                raise GenuineStartError(
                    f"formatting node {node.node_id} failed (exit {code}):\n"
                    f"{procs.tail(node.log, 40)}"
                )

    def _write_properties(self, node: int) -> Path:
        path = self._nodes[node].home / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.settings(node).items()))
        return path

    def _start_node(self, node: int) -> None:
        n = self._nodes[node]
        cmd = self._java("kafka.Kafka", str(self._write_properties(node)), heap_mb=self.heap_mb)
        n.proc, n.stopped = procs.spawn(cmd, n.log, n.home), False

    async def _wait_ready(self, ids: list[int], deadline: float) -> None:
        """Until each of ``ids`` answers ApiVersions and Metadata lists them all."""
        while True:
            for i in ids:
                n = self._nodes[i]
                if n.proc is None or n.proc.poll() is not None:
                    code = None if n.proc is None else n.proc.returncode
                    raise GenuineStartError(
                        f"Kafka {self.version} broker {i} exited (code {code}) while "
                        f"starting; log {n.log}:\n{procs.tail(n.log, 40)}"
                    )
            if await self._answers(ids):
                return
            if time.monotonic() > deadline:
                raise GenuineStartError(
                    f"Kafka {self.version} ({self.brokers} broker(s)) not ready within "
                    f"{self.start_timeout_s:.0f} s:\n{self.log_tail(40)}"
                )
            await asyncio.sleep(0.25)

    async def _answers(self, ids: list[int]) -> bool:
        try:
            for i in ids:
                await procs.api_versions(self._nodes[i].port)
            async with self._admin() as admin:
                cluster = await admin.describe_cluster()
        except (TimeoutError, KafkaError, OSError, asyncio.IncompleteReadError):
            return False
        return set(ids) <= {b["node_id"] for b in cluster["brokers"]}

    @contextlib.asynccontextmanager
    async def _admin(self) -> AsyncIterator[AIOKafkaAdminClient]:
        """An admin client bootstrapping from the brokers that run and are not stopped."""
        up = [n for n in self._nodes.values() if self.pid(n.node_id) and not n.stopped]
        servers = ",".join(f"127.0.0.1:{n.port}" for n in up) or self.bootstrap_servers
        admin = AIOKafkaAdminClient(bootstrap_servers=servers, request_timeout_ms=5000)
        try:
            await admin.start()
            yield admin
        finally:
            await admin.close()

    async def api_versions(self, node: int) -> dict[int, int]:
        """Broker ``node``'s ApiVersions answer: api key -> highest version."""
        return await procs.api_versions(self._node(node).port)

    async def coordinator(self, key: str, kind: str = "group", timeout_s: float = 30.0) -> int:
        """The node id of the group (``kind="group"``) or transaction
        (``kind="transaction"``) coordinator for ``key`` (FindCoordinator), retried while
        it is not available yet (its internal topic being created or moving)."""
        ctype = {"group": 0, "transaction": 1}[kind]
        deadline = time.monotonic() + timeout_s
        async with self._admin() as admin:
            while True:
                try:
                    return int(await admin.find_coordinator(key, ctype))
                except KafkaError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)

    def _node(self, node: int) -> _Node:
        if node not in self._nodes:
            raise KeyError(f"no broker {node}; brokers are {self.node_ids}")
        return self._nodes[node]

    def pid(self, node: int) -> int | None:
        proc = self._node(node).proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def kill(self, node: int) -> None:
        """SIGKILL broker ``node`` (and reap it)."""
        procs.kill(self._node(node).proc)

    def stop_node(self, node: int) -> None:
        """SIGSTOP broker ``node`` (returns once it is stopped): its connections stay open
        and nothing is answered."""
        n = self._node(node)
        if n.proc is not None and n.proc.poll() is None:
            n.proc.send_signal(signal.SIGSTOP)
            os.waitpid(n.proc.pid, os.WUNTRACED)  # returns once it has stopped
            n.stopped = True

    def cont(self, node: int) -> None:
        """SIGCONT broker ``node`` after ``stop_node``."""
        n = self._node(node)
        if n.proc is not None and n.proc.poll() is None:
            n.proc.send_signal(signal.SIGCONT)
        n.stopped = False

    async def restart(self, node: int, timeout_s: float | None = None) -> None:
        """Stop broker ``node`` if it runs (SIGTERM, then SIGKILL), start it again on its
        data and ports, and wait until it is registered and answers."""
        n = self._node(node)
        if n.proc is not None:
            await asyncio.to_thread(procs.terminate, n.proc, 15.0)
        self._start_node(node)
        await self._wait_ready([node], time.monotonic() + (timeout_s or self.start_timeout_s))

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_sync)

    def stop_sync(self, grace_s: float = 10.0) -> None:
        """SIGTERM every broker at once, SIGKILL those left after ``grace_s``, then
        ZooKeeper the same way; remove the temp folder."""
        running = [n.proc for n in self._nodes.values() if n.proc is not None]
        for proc in running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        end = time.monotonic() + grace_s
        for proc in running:
            procs.terminate(proc, max(0.1, end - time.monotonic()))
        if self._zk is not None:
            procs.terminate(self._zk, grace_s)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
