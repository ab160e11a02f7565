"""``python -m eosflow.testing``: the test cluster in its own process.

Prints ``BOOTSTRAP host:port`` on stdout once listening, then serves until SIGTERM/SIGINT.
Topics are auto-created on first Metadata request, as Kafka's default
``auto.create.topics.enable=true``; ``--no-auto-create-topics`` answers unknown topics
with UNKNOWN_TOPIC_OR_PARTITION instead, as Kafka does with it set to false.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from ._cluster import PROFILES, ClusterSettings, FakeCluster
from ._groups import GroupSettings
from ._txn import TxnSettings


async def _serve(args: argparse.Namespace) -> None:
    settings = ClusterSettings(
        profile=args.profile,
        auto_create_topics=args.auto_create_topics,
        default_partitions=args.default_partitions,
        groups=GroupSettings(min_session_timeout_s=args.min_session_timeout_s),
        txns=TxnSettings(sweep_interval_s=args.txn_sweep_interval_s),
        latency_s=args.latency_ms / 1000,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with FakeCluster(settings, port=args.port) as cluster:
        for spec in args.topic or []:
            name, _, parts = spec.partition(":")
            cluster.create_topic(name, int(parts or 1))
        print(f"BOOTSTRAP {cluster.bootstrap_servers}", flush=True)
        await stop.wait()


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m eosflow.testing", description="eosflow's wire-level Kafka test cluster"
    )
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--profile", choices=sorted(PROFILES), default="4.0")
    p.add_argument("--topic", action="append", help="name:partitions, repeatable")
    p.add_argument(
        "--auto-create-topics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="create an unknown topic when a Metadata request names it (Kafka's default)",
    )
    p.add_argument("--default-partitions", type=int, default=1)
    p.add_argument("--min-session-timeout-s", type=float, default=6.0)
    p.add_argument("--txn-sweep-interval-s", type=float, default=10.0)
    p.add_argument(
        "--latency-ms",
        type=float,
        default=0.0,
        help="delay every request by this much (a stand-in for network round trips)",
    )
    p.add_argument("--log-level", default="warning")
    args = p.parse_args()
    logging.basicConfig(level=args.log_level.upper())
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
