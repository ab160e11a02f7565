"""The consumer group protocol's requests (KIP-848) on aiokafka's connections, for
``_membership``: ConsumerGroupHeartbeat to the group coordinator, topic ids from
Metadata v12, and the consumer's manual assignment that keeps what it keeps.

aiokafka 0.14 has no KIP-848: under the consumer protocol eosflow's consumer joins no
group of its own (``_clients.manual_consumer``); eosflow is the member and assigns
partitions to it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from .._errors import AuthorizationError
from .._protocol import codes, specs, wire
from .._timeouts import within
from ._errors import AUTHORIZATION, error_for, error_name, map_error
from ._requests import GROUP_COORDINATOR, send_retrying


@dataclass(frozen=True)
class HeartbeatAnswer:
    """A ConsumerGroupHeartbeat answer: ``code`` 0 or Kafka's error code (the coordinator
    moves and dropped connections were resent first); ``assignment`` by topic id, None
    when the answer carried none."""

    code: int
    message: str | None
    member_id: str
    epoch: int
    interval_s: float
    assignment: dict[uuid.UUID, list[int]] | None


async def group_heartbeat(
    consumer: AIOKafkaConsumer, group_id: str, body: dict[str, Any], timeout_s: float
) -> HeartbeatAnswer:
    """One ConsumerGroupHeartbeat (``body``: its request fields) to the group's
    coordinator. Coordinator moves, timeouts and dropped connections are resent for at
    most ``timeout_s``, then ``TransientError``; a refused permission raises
    ``AuthorizationError``; any other error code is answered."""
    req = wire.SpecRequest.of(specs.CONSUMER_GROUP_HEARTBEAT, body)
    step = "ConsumerGroupHeartbeat"
    code, resp = await send_retrying(
        consumer._client,
        GROUP_COORDINATOR,
        group_id,
        req,
        lambda r: int(r.error_code),
        step,
        timeout_s,
    )
    if code == codes.TOPIC_AUTHORIZATION_FAILED:  # the answer does not say which topic
        topics = sorted(body["subscribed_topic_names"])
        names = ", ".join(topics)
        resource = f"topic {names}" if len(topics) == 1 else f"one of topics {names}"
        raise AuthorizationError(step, "READ", resource, error_name(code))
    if code in AUTHORIZATION:
        raise map_error(error_for(code), step, "READ")
    if code:
        return HeartbeatAnswer(code, resp.error_message, body["member_id"], -1, 0.0, None)
    assignment = None
    if resp.assignment is not None:
        pairs, _tags = resp.assignment
        assignment = {uuid.UUID(str(t)): list(ps) for t, ps, _ in pairs}
    return HeartbeatAnswer(
        0,
        None,
        resp.member_id or body["member_id"],
        int(resp.member_epoch),
        resp.heartbeat_interval_ms / 1000,
        assignment,
    )


async def topic_ids(
    consumer: AIOKafkaConsumer, topics: list[str], timeout_s: float
) -> dict[uuid.UUID, str]:
    """The id of each of ``topics`` that exists (Metadata v10+), as id -> name."""
    body = {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False}
    req = wire.SpecRequest.of(specs.METADATA, body, min_version=10)
    client = consumer._client
    step = "Metadata (topic ids)"
    try:
        resp = await within(client.send(client.get_random_node(), req), timeout_s)
    except Exception as exc:
        raise map_error(exc, step) from exc
    out: dict[uuid.UUID, str] = {}
    for error, name, topic_id, *_ in resp.topics:
        if error == 0 and name is not None:
            out[uuid.UUID(str(topic_id))] = name
    return out


def reassign(consumer: AIOKafkaConsumer, partitions: set[TopicPartition]) -> None:
    """Assign exactly ``partitions``, keeping the fetch position and pause of each one
    already assigned (aiokafka's ``assign`` starts every partition afresh, which would
    send a kept partition back to the reset policy). New partitions start paused: their
    owner positions them (``Positions.take``) before anything is fetched."""
    sub = consumer._subscription.subscription
    kept: dict[TopicPartition, tuple[int | None, bool]] = {}
    if sub is not None and sub.assignment is not None:
        for tp in partitions & set(sub.assignment.tps):
            state = sub.assignment.state_value(tp)
            kept[tp] = (state.position if state.has_valid_position else None, state.paused)
    consumer.assign(sorted(partitions))
    for tp in partitions:
        position, paused = kept.get(tp, (None, True))
        if position is not None:
            consumer.seek(tp, position)
        if paused:
            consumer.pause(tp)
