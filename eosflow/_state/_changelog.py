"""The changelog of a store: its topic's name (checked legal) and the position record
that closes each transaction's writes. Producing them is ``Stores.send``'s
(``_state/__init__.py``), in the transaction, through ``_produce``.

Each store has, per input topic, a compacted changelog topic with one partition per
input partition: ``<group>--<input topic>--<store>--changelog``. A transaction that
consumed input partition p writes, for every store, its changed keys (a delete is a
tombstone) and then one **position record** -- key ``RESERVED_KEY``, value the next input
offset the transaction commits for p -- to partition p of that store's changelog, in the
same Kafka transaction as its outputs and offsets. So the committed changelog says, at
every position record, which input offset the store reflects there; restore compares
that with the group's committed offset to know it has seen every committed transaction
(``_restore``). Compaction keeps the latest position record (one key).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable

from .._errors import ConfigError

_POSITION = struct.Struct(">q")
_NONE = -(2**63)
_LEGAL = re.compile(r"^[A-Za-z0-9._-]+$")
_MAX_TOPIC = 249  # Kafka's longest topic name


def changelog_topic(group_id: str, topic: str, store: str) -> str:
    """``<group>--<topic>--<store>--changelog``. Names holding ``--`` themselves could
    meet another app's (group ``a--b`` with topic ``c``, group ``a`` with topic ``b--c``):
    keep ``--`` out of group ids, input topics and store names of one cluster."""
    return f"{group_id}--{topic}--{store}--changelog"


def check_names(group_id: str, topics: tuple[str, ...], stores: list[str]) -> None:
    """Every changelog name must be a legal Kafka topic: a one-line ``ConfigError``
    naming the culprit otherwise (checked before anything connects)."""
    for store in stores:
        if not _LEGAL.match(store):
            raise ConfigError(
                f"store name {store!r}: use letters, digits, '.', '_' and '-' "
                "(it names a changelog topic and a local column family)"
            )
        for topic in topics:
            name = changelog_topic(group_id, topic, store)
            if not _LEGAL.match(name):
                raise ConfigError(
                    f"group_id {group_id!r} cannot name the changelog topic {name!r}: "
                    "Kafka topic names take letters, digits, '.', '_' and '-'"
                )
            if len(name) > _MAX_TOPIC:
                raise ConfigError(
                    f"the changelog topic {name[:40]}... is {len(name)} characters, over "
                    f"Kafka's {_MAX_TOPIC}: shorten the group id, input topic or store name"
                )


def encode_position(position: int | None) -> bytes:
    return _POSITION.pack(_NONE if position is None else position)


def decode_position(data: bytes | None) -> int | None:
    if data is None or len(data) != _POSITION.size:
        raise ValueError(f"not a position record value: {data!r}")
    (value,) = _POSITION.unpack(data)
    return None if value == _NONE else int(value)


# The committed offsets' metadata of a partition with stores: the changelog offset of
# the last record its transaction wrote, per store. A restore is complete only once it
# has read past them: a transaction that committed the partition's offset again without
# moving it (a wall-clock timer fired) leaves the position alone, and only this tells the
# next owner that its writes are still to come (their commit markers not yet landed).
_METADATA = "eosflow-changelog:"
_METADATA_MAX = 4096  # Kafka's default offset.metadata.max.bytes


def encode_written(offsets: dict[str, int]) -> str:
    """``store -> changelog offset of the transaction's last record`` as metadata."""
    return _METADATA + json.dumps(offsets, sort_keys=True, separators=(",", ":"))


def check_written_fits(stores: Iterable[str]) -> None:
    """``encode_written`` naming every one of ``stores`` (what a timer's commit does)
    fits Kafka's default offset.metadata.max.bytes; else a one-line ``ConfigError``."""
    size = len(encode_written({s: 2**63 - 1 for s in stores}).encode())
    if size > _METADATA_MAX:
        raise ConfigError(
            f"with timers, a commit's offset metadata names every store: {size} "
            f"bytes for these, over Kafka's {_METADATA_MAX} "
            "(offset.metadata.max.bytes); use fewer or shorter store names"
        )


def decode_written(metadata: str | None) -> dict[str, int]:
    """``encode_written``'s offsets; {} for any other metadata (none, another client's,
    an older eosflow's)."""
    if not metadata or not metadata.startswith(_METADATA):
        return {}
    try:
        found = json.loads(metadata[len(_METADATA) :])
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and type(v) is int}
