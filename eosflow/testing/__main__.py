"""``python -m eosflow.testing``: the test cluster, or genuine Kafka, in its own process.

Prints ``BOOTSTRAP host:port[,host:port...]`` on stdout once listening, then serves until
SIGTERM/SIGINT. Topics are auto-created on first Metadata request, as Kafka's default
``auto.create.topics.enable=true``; ``--no-auto-create-topics`` answers unknown topics
with UNKNOWN_TOPIC_OR_PARTITION instead, as Kafka does with it set to false.

``--genuine [--version V] [--brokers N]`` runs Apache Kafka's own broker from the jars
(resolved once with Maven, see ``_genuine_jars``) instead, and stops it on SIGTERM/SIGINT;
the test-cluster-only options are refused with it.

``--schema-registry`` adds a genuine schema registry beside either (Apicurio Registry,
built once with Maven, see ``_registry``): once it answers too, ``SCHEMA_REGISTRY <url>``
(its Confluent-compatible API) follows the ``BOOTSTRAP`` line; it is stopped with the
brokers. Java or Maven missing, or a broker or the registry not starting: one line on
stderr, exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ._broker import PROFILES, ClusterSettings
from ._cluster import FakeCluster
from ._genuine import DEFAULT_VERSION, GenuineKafka, GenuineStartError, GenuineUnavailable
from ._groups import GroupSettings
from ._registry import SchemaRegistry
from ._txn import TxnSettings

# test-cluster-only options and their defaults (None in the parser, to tell if given)
_FAKE_ONLY = {
    "port": 0,
    "profile": "4.0",
    "min_session_timeout_s": 6.0,
    "txn_sweep_interval_s": 10.0,
    "latency_ms": 0.0,
}


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


@contextlib.asynccontextmanager
async def _registry(args: argparse.Namespace) -> AsyncIterator[SchemaRegistry | None]:
    """A schema registry when ``--schema-registry`` asks for one, else None."""
    if not args.schema_registry:
        yield None
        return
    async with SchemaRegistry() as registry:
        print(
            f"schema registry ready in {registry.started_in_s:.1f} s; log: {registry.log_path}",
            file=sys.stderr,
            flush=True,
        )
        yield registry


def _announce(bootstrap: str, registry: SchemaRegistry | None) -> None:
    print(f"BOOTSTRAP {bootstrap}", flush=True)
    if registry is not None:
        print(f"SCHEMA_REGISTRY {registry.url}", flush=True)


def _topics(args: argparse.Namespace) -> list[tuple[str, int]]:
    return [(n, int(p or 1)) for n, _, p in (s.partition(":") for s in args.topic or [])]


async def _serve(args: argparse.Namespace) -> None:
    settings = ClusterSettings(
        profile=args.profile,
        auto_create_topics=args.auto_create_topics,
        default_partitions=args.default_partitions,
        groups=GroupSettings(min_session_timeout_s=args.min_session_timeout_s),
        txns=TxnSettings(sweep_interval_s=args.txn_sweep_interval_s),
        latency_s=args.latency_ms / 1000,
    )
    stop = _stop_event()
    async with FakeCluster(settings, port=args.port) as cluster, _registry(args) as registry:
        for name, parts in _topics(args):
            cluster.create_topic(name, parts)
        _announce(cluster.bootstrap_servers, registry)
        await stop.wait()


async def _serve_genuine(args: argparse.Namespace) -> None:
    stop = _stop_event()
    kafka = GenuineKafka(
        args.kafka_version,
        args.brokers,
        auto_create_topics=args.auto_create_topics,
        default_partitions=args.default_partitions,
    )
    async with kafka, _registry(args) as registry:
        if args.topic:
            admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
            await admin.start()
            try:
                rf = min(3, args.brokers)
                await admin.create_topics([NewTopic(n, p, rf) for n, p in _topics(args)])
            finally:
                await admin.close()
        logs = ", ".join(str(p) for p in kafka.log_paths.values())
        print(
            f"Kafka {kafka.version}, {args.brokers} broker(s), ready in "
            f"{kafka.started_in_s:.1f} s; logs: {logs}",
            file=sys.stderr,
            flush=True,
        )
        _announce(kafka.bootstrap_servers, registry)
        await stop.wait()


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m eosflow.testing",
        description="eosflow's wire-level Kafka test cluster, or genuine Kafka (--genuine)",
    )
    p.add_argument("--genuine", action="store_true", help="run Apache Kafka from its jars")
    p.add_argument(
        "--version",
        "--kafka-version",
        dest="kafka_version",
        default=None,
        help=f"with --genuine: the Kafka release (default {DEFAULT_VERSION})",
    )
    p.add_argument("--brokers", type=int, default=None, help="with --genuine: 1 (default) or 3")
    p.add_argument("--port", type=int, default=None, help="0 picks a free port")
    p.add_argument("--profile", choices=sorted(PROFILES), default=None)
    p.add_argument("--topic", action="append", help="name:partitions, repeatable")
    p.add_argument(
        "--auto-create-topics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="create an unknown topic when a Metadata request names it (Kafka's default)",
    )
    p.add_argument("--default-partitions", type=int, default=1)
    p.add_argument("--min-session-timeout-s", type=float, default=None)
    p.add_argument("--txn-sweep-interval-s", type=float, default=None)
    p.add_argument(
        "--latency-ms",
        type=float,
        default=None,
        help="delay every request by this much (a stand-in for network round trips)",
    )
    p.add_argument(
        "--schema-registry",
        action="store_true",
        help="also run a genuine schema registry (Apicurio; Java 17 and Maven); prints its URL",
    )
    p.add_argument("--log-level", default="warning")
    args = p.parse_args()
    logging.basicConfig(level=args.log_level.upper())
    if args.genuine:
        given = [k for k in _FAKE_ONLY if getattr(args, k) is not None]
        if given:
            p.error(f"--{given[0].replace('_', '-')} applies to the test cluster, not --genuine")
        args.kafka_version = args.kafka_version or DEFAULT_VERSION
        args.brokers = args.brokers or 1
        _run(_serve_genuine(args))
        return
    if args.kafka_version is not None or args.brokers is not None:
        p.error("--version and --brokers apply to --genuine only")
    for key, default in _FAKE_ONLY.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    _run(_serve(args))


def _run(serve: Coroutine[Any, Any, None]) -> None:
    try:
        asyncio.run(serve)
    except (GenuineUnavailable, GenuineStartError) as exc:
        print(f"python -m eosflow.testing: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
