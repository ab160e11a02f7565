"""Where partitions' logs start or end, asked by eosflow itself (ListOffsets), for a
partition the group has no committed offset for: the reset policy's position.

Why not aiokafka's ``seek_to_beginning``/``seek_to_end``: they wait, up to its 40 s
request timeout, for its fetcher to reset the position -- and its fetcher first waits for
the committed offsets of every newly assigned partition of the same broker, which
aiokafka reads through its group coordinator. When that coordinator failed, aiokafka
finds it again only from its coordination routine, which sits in eosflow's rebalance
callback waiting for the seek: 40 s per never-committed partition, the member evicted
meanwhile (issue 50). These requests go to each partition's leader and need no
coordinator.

Versions: v2 to v5 (v2: the isolation level, so a read_committed consumer's end is the
last stable offset; Kafka 2.4 speaks up to v5; 4.0 removed v0, KIP-896).

Retried, with metadata refreshed and a growing backoff, each attempt waiting at most
``attempt_s``: a leader that moved or is not known yet (NOT_LEADER_OR_FOLLOWER,
LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH), OFFSET_NOT_AVAILABLE (a new leader whose high watermark is not
known yet), REQUEST_TIMED_OUT, UNKNOWN_SERVER_ERROR, dropped connections and unanswered
requests. Past ``timeout_s`` the outcome is ``TransientError`` naming ListOffsets, the
partitions and the last cause -- never a guessed position. Any other answer is mapped
(``map_error``): an authorization refusal names the topics.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import ConnectionGroup
from aiokafka.errors import KafkaError

from .._errors import TransientError
from .._protocol import codes, specs, wire
from .._timeouts import within
from ._errors import error_for, error_name, map_error
from ._requests import Backoff

STEP = "ListOffsets"
EARLIEST, LATEST = -2, -1  # ListOffsets' timestamps for a log's start and end
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
RETRIED = frozenset(
    {
        codes.NOT_LEADER_OR_FOLLOWER,
        codes.LEADER_NOT_AVAILABLE,
        codes.UNKNOWN_TOPIC_OR_PARTITION,
        codes.FENCED_LEADER_EPOCH,
        codes.UNKNOWN_LEADER_EPOCH,
        codes.OFFSET_NOT_AVAILABLE,
        codes.REQUEST_TIMED_OUT,
        codes.UNKNOWN_SERVER_ERROR,
    }
)


async def log_offsets(
    consumer: AIOKafkaConsumer,
    partitions: list[TopicPartition],
    reset: str,
    timeout_s: float,
    attempt_s: float | None = None,
    committed: bool = True,
) -> dict[TopicPartition, int]:
    """Each of ``partitions``' log start (``reset`` "earliest") or end ("latest": the
    last stable offset, as a read_committed consumer sees it; not ``committed``: the
    high watermark, undecided transactions' records included), from its leader. Retried
    as the module says within ``timeout_s``, each attempt at most ``attempt_s`` (default:
    all the time left); then ``TransientError``."""
    client = consumer._client
    stamp = EARLIEST if reset == "earliest" else LATEST
    left = set(partitions)
    found: dict[TopicPartition, int] = {}
    deadline = time.monotonic() + timeout_s
    backoff = Backoff()
    last = "no answer"
    while True:
        leaders, leaderless = _by_leader(client, left)
        if leaderless:
            last = f"no leader known for {_names(leaderless)}"
        wait = max(0.0, deadline - time.monotonic())
        wait = min(wait, attempt_s or wait)
        answers = await asyncio.gather(
            *(
                within(_ask(client, node, tps, stamp, committed), wait)
                for node, tps in leaders.items()
            ),
            return_exceptions=True,
        )
        for answer in answers:
            if isinstance(answer, BaseException):
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                error = map_error(answer, STEP, "DESCRIBE")
                if not isinstance(error, TransientError):
                    raise error from answer
                cut = isinstance(answer, TimeoutError) and time.monotonic() >= deadline
                last = last if cut and last != "no answer" else error.cause  # the deadline's cut
                continue
            for tp, (code, offset) in answer.items():
                if tp not in left:
                    continue
                if code == 0 and offset >= 0:
                    found[tp] = offset
                    left.discard(tp)
                elif code in RETRIED or code == 0:
                    last = error_name(code) if code else f"no offset for {_names([tp])}"
                else:
                    raise map_error(error_for(code, {tp.topic}), STEP, "DESCRIBE")
        if not left:
            return found
        if time.monotonic() >= deadline:
            raise TransientError(
                STEP, f"offsets of {_names(left)} not read within {timeout_s:g} s ({last})"
            )
        for topic in {tp.topic for tp in left}:
            client.add_topic(topic)  # known to the client's metadata from now on
        client.force_metadata_update()  # leaders may have moved: asked again below
        await backoff.sleep(deadline)


def _by_leader(
    client: Any, partitions: set[TopicPartition]
) -> tuple[dict[int, list[TopicPartition]], list[TopicPartition]]:
    """``partitions`` grouped by their leader as the client's metadata has it, and those
    without a known leader."""
    leaders: dict[int, list[TopicPartition]] = {}
    leaderless = []
    for tp in partitions:
        node = client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            leaderless.append(tp)
        else:
            leaders.setdefault(int(node), []).append(tp)
    return leaders, leaderless


async def _ask(
    client: Any, node: int, partitions: list[TopicPartition], stamp: int, committed: bool
) -> dict[TopicPartition, tuple[int, int]]:
    """One ListOffsets to ``node``: (error code, offset) per partition it answered."""
    topics: dict[str, list[dict[str, int]]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(
            {"partition": tp.partition, "current_leader_epoch": -1, "timestamp": stamp}
        )
    body = {
        "replica_id": -1,
        "isolation_level": READ_COMMITTED if committed else READ_UNCOMMITTED,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
    }
    req = wire.SpecRequest.of(specs.LIST_OFFSETS, body, min_version=2)
    try:
        # not on the fetcher's connection: a broker answers a connection's requests in
        # order, and one behind a long-polling fetch waited for it (up to
        # fetch_max_wait_ms, 500 ms by default: an abort's rewind took that long)
        resp = (await client.send(node, req, group=ConnectionGroup.COORDINATION)).to_object()
    except KafkaError:
        client.force_metadata_update()
        raise
    return {
        TopicPartition(t["topic"], p["partition"]): (int(p["error_code"]), int(p["offset"]))
        for t in resp["topics"]
        for p in t["partitions"]
    }


def _names(partitions: Any) -> str:
    return ", ".join(sorted(f"{tp.topic}[{tp.partition}]" for tp in partitions))
