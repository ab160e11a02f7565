"""A consumer's position reset that finds a moved leader.

aiokafka's fetcher resets a position (``seek_to_beginning``, an offset out of range)
with a ListOffsets to the leader its metadata names. Answered NOT_LEADER_OR_FOLLOWER or
UNKNOWN_TOPIC_OR_PARTITION, it logs "Failed fetch offsets", sleeps ``retry_backoff_ms``
and asks the same broker again -- without the metadata update its fetch path forces on
the same answers. After a leader moved, it asks the old one until something else
refreshes the metadata (``metadata_max_age_ms``: 5 minutes): seen in the broker chaos
test on genuine Kafka 4.4.0, a restore consumer asked a resumed broker ~80 times a
second for 2 minutes while the stores it restored stood still.

``refreshes_leaders(consumer)``, applied to every consumer eosflow starts (``start``),
makes those two answers force a metadata update before the fetcher's retry, as a
fetch's do; its next ListOffsets goes to the leader the new metadata names. The cost:
one Metadata request per refused ListOffsets. Failure mode: a later aiokafka that stops
calling ``Fetcher._proc_offset_request`` leaves the wrapper unused (the stall returns,
nothing worse): ``tests/runtime/test_liveness.py`` pins that the metadata is asked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import NotLeaderForPartitionError, UnknownTopicOrPartitionError

__all__ = ["refreshes_leaders"]


def refreshes_leaders(consumer: AIOKafkaConsumer) -> None:
    """Wrap ``consumer``'s (started) fetcher so a ListOffsets refused for leadership
    forces a metadata update first (the module's doc). Applied once."""
    fetcher = getattr(consumer, "_fetcher", None)
    ask: Callable[..., Awaitable[Any]] | None = getattr(fetcher, "_proc_offset_request", None)
    if fetcher is None or ask is None or getattr(ask, "eosflow", False):
        return
    client = consumer._client

    async def proc_offset_request(node_id: int, topic_data: Any) -> Any:
        try:
            return await ask(node_id, topic_data)
        except (NotLeaderForPartitionError, UnknownTopicOrPartitionError):
            client.force_metadata_update()  # the retry asks the leader it names
            raise

    proc_offset_request.eosflow = True  # type: ignore[attr-defined]
    fetcher._proc_offset_request = proc_offset_request
