"""Coordinator lookups, cached per client: aiokafka's ``coordinator_lookup`` asks the
cluster every time (two extra round trips per commit otherwise). An entry goes when the
broker says the coordinator moved (``forget``) and when its client closes
(``forget_client``)."""

from __future__ import annotations

from typing import Any

_coordinators: dict[tuple[int, int, str], int] = {}


async def coordinator(client: Any, coord_type: int, key: str) -> int:
    """The coordinator node of ``key`` (``coord_type`` 0: group, 1: transaction)."""
    slot = (id(client), coord_type, key)
    node = _coordinators.get(slot)
    if node is None:
        node = int(await client.coordinator_lookup(coord_type, key))
        _coordinators[slot] = node
    return node


def forget(client: Any, coord_type: int, key: str) -> None:
    _coordinators.pop((id(client), coord_type, key), None)


def forget_client(client: Any) -> None:
    for slot in [s for s in _coordinators if s[0] == id(client)]:
        del _coordinators[slot]
