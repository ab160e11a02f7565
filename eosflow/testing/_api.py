"""The handler registry shared by the ``_handlers_*`` modules: one handler per Kafka API,
request dict in, response dict out, registered by Kafka's name for the API.

Handlers are version-agnostic: they read the field names of the newest version the
cluster decodes (falling back to older names where a version renamed a field) and fill
every field any version may want; ``_codec`` drops what the negotiated version lacks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .._protocol import codes
from .._records import Partition
from ._broker import Broker
from ._codec import API_KEYS, Frame

Body = dict[str, Any]
Handler = Callable[[Broker, Frame, str], Awaitable[Body]]
HANDLERS: dict[int, Handler] = {}


def handles(api: str) -> Callable[[Handler], Handler]:
    """Register the handler of an API, by Kafka's name for it (e.g. ``"EndTxn"``)."""

    def deco(fn: Handler) -> Handler:
        HANDLERS[API_KEYS[api]] = fn
        return fn

    return deco


def tp_offsets(topics: list[Body]) -> dict[Partition, tuple[int, str | None]]:
    out: dict[Partition, tuple[int, str | None]] = {}
    for t in topics:
        name: str = t["name"] if "name" in t else t["topic"]
        for p in t["partitions"]:
            idx: int = p.get("partition_index", p.get("partition"))
            off: int = p.get("committed_offset", p.get("offset"))
            meta = p.get("committed_metadata", p.get("metadata"))
            out[(name, idx)] = (off, "" if meta is None else meta)  # Kafka stores null as ""
    return out


METADATA_MAX = 4096  # Kafka's offset.metadata.max.bytes (default), in characters


def sorted_out(
    offsets: dict[Partition, tuple[int, str | None]], exists: Callable[[Partition], bool]
) -> tuple[dict[Partition, tuple[int, str | None]], dict[Partition, int]]:
    """An offset commit's partitions Kafka takes, and the answers of those it refuses:
    UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist, then
    OFFSET_METADATA_TOO_LARGE for metadata over ``METADATA_MAX`` characters."""
    taken, refused = {}, {}
    for tp, (off, meta) in offsets.items():
        if not exists(tp):
            refused[tp] = codes.UNKNOWN_TOPIC_OR_PARTITION
        elif meta and len(meta) > METADATA_MAX:
            refused[tp] = codes.OFFSET_METADATA_TOO_LARGE
        else:
            taken[tp] = (off, meta)
    return taken, refused


def by_topic(results: dict[Partition, int], tkey: str, pkey: str, ikey: str) -> list[Body]:
    topics: dict[str, list[Body]] = {}
    for (topic, part), code in results.items():
        topics.setdefault(topic, []).append({ikey: part, "error_code": code})
    return [{tkey: t, pkey: parts} for t, parts in topics.items()]
