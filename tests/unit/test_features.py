"""The finalized features of an ApiVersions v3+ answer (KIP-584), read from its tag 2."""

from __future__ import annotations

from aiokafka.protocol.types import CompactString, Int16, UnsignedVarInt32

from eosflow._protocol import _wire


def _feature(name: str, max_level: int, min_level: int) -> bytes:
    return (
        CompactString("utf-8").encode(name)
        + Int16.encode(max_level)
        + Int16.encode(min_level)
        + UnsignedVarInt32.encode(0)  # no tags
    )


def test_finalized_features_are_read_from_tag_2() -> None:
    array = UnsignedVarInt32.encode(3) + _feature("group.version", 1, 1)
    array += _feature("transaction.version", 2, 0)
    tags = {0: b"\x01", 2: array}  # tag 0 (supported features) is not read
    assert _wire.finalized_features(tags) == {"group.version": 1, "transaction.version": 2}


def test_no_tag_or_an_empty_array_means_no_features() -> None:
    assert _wire.finalized_features({}) == {}
    assert _wire.finalized_features({2: UnsignedVarInt32.encode(1)}) == {}
