"""``eosflow console``: a group's page in the browser, live -- what ``eosflow status``
reads (``group_status``), shown by the console room's ``GroupPage`` and served on
127.0.0.1 (a free port unless one is given) until SIGINT or SIGTERM.

It needs nothing of the apps: only the brokers and, for a secured cluster, the same
security settings ``eosflow status`` takes (``--security-protocol`` and the others, or
``EOSFLOW_*``). The page never shows them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
from typing import Any

from .._console import GroupPage
from .._security import KafkaSecurity
from ._http import MetricsServer
from ._status import group_status


def console_command(
    bootstrap_servers: str,
    group_id: str,
    security: KafkaSecurity,
    port: int = 0,
    host: str = "127.0.0.1",
) -> int:
    """Serve the group's page until SIGINT or SIGTERM; the address goes to stdout."""
    return asyncio.run(_serve(bootstrap_servers, group_id, security, host, port))


async def _serve(
    bootstrap_servers: str, group_id: str, security: KafkaSecurity, host: str, port: int
) -> int:
    async def look() -> dict[str, Any]:
        s = await group_status(bootstrap_servers, group_id, security)
        partitions = [dataclasses.asdict(p) for p in s.partitions]
        return {
            "group": s.group_id,
            "state": s.state,
            "protocol": s.protocol,
            "members": s.members,
            "lag": s.lag,
            "partitions": partitions,
        }

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    page = GroupPage(group_id, look, loop)
    server = MetricsServer(host, port, None, None, None, page.routes(), setting="--port")
    server.start()
    print(f"eosflow console: group {group_id} on http://{host}:{server.port}/", flush=True)
    try:
        await stop.wait()
    finally:
        await asyncio.to_thread(server.stop)
    return 0
