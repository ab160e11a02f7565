"""``eosflow console``: a group's page in the browser, live -- what ``eosflow status``
reads (``group_status``) and its members' transactional ids as their coordinators hold
them (``member_transactions``; Kafka 3.0+), shown by the console room's ``GroupPage``
and served on 127.0.0.1 (a free port unless one is given) until SIGINT or SIGTERM.

It needs nothing of the apps: only the brokers and, for a secured cluster, the same
security settings ``eosflow status`` takes (``--security-protocol`` and the others, or
``EOSFLOW_*``). The page never shows them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
from typing import Any

from .. import _aiokafka as ak
from .._console import GroupPage
from .._errors import EosflowError
from .._security import KafkaSecurity
from ._http import MetricsServer
from ._status import group_status, member_transactions


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
        note = None
        try:
            txns = await member_transactions(bootstrap_servers, security, s.clients)
        except EosflowError as exc:  # the group's view stands without them
            txns, note = None, f"the transactions were not read: {exc}"
        if txns is None and note is None:
            note = "this cluster does not describe transactions (Kafka 3.0+ does)"
        return {
            "group": s.group_id,
            "state": s.state,
            "protocol": s.protocol,
            "members": s.members,
            "lag": s.lag,
            "partitions": partitions,
            "transactions": None if txns is None else [_txn(c, t) for c, t in txns.items()],
            "transactions_note": note,
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


_OPEN = ("Ongoing", "PrepareCommit", "PrepareAbort")  # a transaction begun, not yet ended


def _txn(client: str, t: ak.TxnView) -> dict[str, Any]:
    return {
        "client": client,
        "id": t.transactional_id,
        "state": t.state,
        "producer": f"{t.producer_id}/{t.producer_epoch}",
        "started_ms": t.started_ms if t.state in _OPEN and t.started_ms >= 0 else None,
        "timeout_ms": t.timeout_ms,
        "partitions": [f"{topic}[{p}]" for topic, p in t.partitions],
    }
