"""The broker a comparison runs against (``python -m benchmarks run --broker ...``).

- ``fake``: the test cluster in its own process (``--broker-latency-ms`` delays each of
  its requests), or the broker ``EOSFLOW_BENCH_BOOTSTRAP`` names;
- ``genuine[:version]``: one Apache Kafka broker from its jars (``GenuineKafka``), stopped
  by pid at the end however the run ends. ``--broker-latency-ms`` adds that much round
  trip to every connection through ``_rtt_proxy`` (the broker advertises the proxy's
  port), and ``--pin`` gives the broker (with this process, which runs the proxy) one
  core and every contender the other: together, a stand-in for a broker on another host.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import AsyncIterator

from benchmarks._rtt_proxy import RttProxy
from benchmarks.cluster_throughput import start_cluster
from eosflow.testing._genuine import DEFAULT_VERSION, GenuineKafka
from eosflow.testing._genuine_procs import api_versions, free_ports

BROKER_HEAP_MB = 1024  # Kafka's own default (kafka-server-start.sh: -Xmx1G)
BROKER_CPU, CONTENDER_CPU = 1, 0  # --pin
PIN_CONTENDER = ["taskset", "-c", str(CONTENDER_CPU)]  # the prefix of a pinned contender


@contextlib.asynccontextmanager
async def broker(args: argparse.Namespace) -> AsyncIterator[tuple[str, str, str]]:
    """(bootstrap, description, Kafka version for Kafka Streams) of the broker asked for,
    stopped (by pid) when the block ends, however it ends."""
    kind, _, version = args.broker.partition(":")
    named = os.environ.get("EOSFLOW_BENCH_BOOTSTRAP")
    if kind == "genuine":
        if named:
            raise SystemExit("EOSFLOW_BENCH_BOOTSTRAP names a broker: drop it or --broker genuine")
        async with _genuine(args, version or DEFAULT_VERSION) as found:
            yield found
        return
    if kind != "fake" or version:
        raise SystemExit(f"--broker: fake or genuine[:version], not {args.broker!r}")
    if args.broker_latency_ms and named:
        raise SystemExit("--broker-latency-ms applies to the test cluster or genuine Kafka")
    if args.pin:
        raise SystemExit("--pin applies to genuine Kafka")
    proc, boot = await start_cluster(args.broker_latency_ms)
    try:
        yield (
            boot,
            named
            or "eosflow test cluster (own process)"
            + (f", +{args.broker_latency_ms:g} ms per request" if args.broker_latency_ms else ""),
            DEFAULT_VERSION,
        )
    finally:
        if proc is not None:
            proc.terminate()
            await proc.wait()


@contextlib.asynccontextmanager
async def _genuine(args: argparse.Namespace, version: str) -> AsyncIterator[tuple[str, str, str]]:
    config: dict[str, str] = dict(getattr(args, "broker_config", None) or {})
    proxy: RttProxy | None = None
    kafka = GenuineKafka(version, heap_mb=BROKER_HEAP_MB, auto_create_topics=False, config=config)
    if args.broker_latency_ms:
        port = free_ports(1)[0]
        config["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
        # the broker's own port is known once it starts: asked at each connection
        proxy = RttProxy(lambda: ("127.0.0.1", _port(kafka)), args.broker_latency_ms)
        await proxy.start(port)
    print(f"starting Apache Kafka {version} (one KRaft broker, -Xmx{BROKER_HEAP_MB}m) ...")
    try:
        await kafka.start()
        where = [f"Apache Kafka {version}, one KRaft broker (own JVM, -Xmx{BROKER_HEAP_MB}m)"]
        boot = kafka.bootstrap_servers
        if proxy is not None:
            boot = f"127.0.0.1:{proxy.port}"
            rtt = await _round_trip_ms(proxy.port) - await _round_trip_ms(_port(kafka))
            where.append(f"+{args.broker_latency_ms:g} ms round trip asked, {rtt:.2f} ms measured")
        if args.pin:
            pid = kafka.pid(kafka.node_ids[0])
            assert pid is not None
            for task in os.listdir(f"/proc/{pid}/task"):  # every JVM thread
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task), {BROKER_CPU})
            os.sched_setaffinity(0, {BROKER_CPU})  # this process: the proxy, the checks
            where.append(f"broker on CPU {BROKER_CPU}, contenders on CPU {CONTENDER_CPU}")
        print(
            f"Kafka {version} ready at {boot} in {kafka.started_in_s:.1f} s (log {kafka.log_path})"
        )
        if where[1:]:
            print("  " + "; ".join(where[1:]), flush=True)
        yield boot, ", ".join(where), version
    finally:
        if proxy is not None:
            await proxy.stop()
        kafka.stop_sync()  # SIGTERM, SIGKILL after 10 s; also on Ctrl-C or failure
        print(f"Kafka {version} stopped", flush=True)


def _port(kafka: GenuineKafka) -> int:
    return int(kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)[1])


async def _round_trip_ms(port: int, n: int = 50) -> float:
    """The median time of an ApiVersions round trip to ``port``, in ms."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await api_versions(port)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return times[len(times) // 2]
