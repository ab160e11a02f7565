"""Which of Kafka's protocol generations a session speaks: the config's choice held
against what the cluster answered in ApiVersions.

Two choices, each ``"auto"`` by default:

- ``group_protocol``: ``"consumer"`` (KIP-848) where the cluster has it -- ConsumerGroup
  Heartbeat served and ``group.version`` >= 1 finalized, as on a new Kafka 4.0+ cluster
  -- else ``"classic"``.
- ``transactions_v2``: on (KIP-890 part 2) where the cluster finalizes
  ``transaction.version`` >= 2 with EndTxn v5, Produce v12 and TxnOffsetCommit v5, else
  off (transactions v1, KIP-360's recovery kept).

Why the newer ones by default (docs/design.md, invariant 46): each was exactly once in
its mechanism tests, under the instance chaos and under the three-broker chaos on
genuine Kafka 4.4.0; the consumer protocol redid no record in a rolling restart where the
classic one redid 74 and 2,766, because only the partitions that move are revoked; and
under transactions v2 the broker itself refuses a zombie's late write to the next
transaction (every EndTxn bumps the epoch). The trade-off: under the consumer protocol the
heartbeat interval and the session timeout are the broker's (``group.consumer.*``, 45 s
by default), not ``heartbeat_interval_s``/``session_timeout_s``.

Failure modes: an explicit ``"consumer"`` or ``"on"`` that the cluster lacks is a
``FatalError`` naming what it lacks, at start or, for transactions v2, at a recovery
that finds the feature lowered (``auto`` then goes on with v1, with a warning). Instances
of one group may differ in protocol: Kafka 4.x migrates a group between them online.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Literal

from aiokafka import AIOKafkaProducer

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import FatalError

log = logging.getLogger("eosflow.session")


@dataclass(frozen=True)
class Protocols:
    """What the session speaks: the group protocol and whether transactions are v2."""

    group: Literal["classic", "consumer"]
    txn_v2: bool


def choose(config: EosConfig, caps: ak.Capabilities) -> Protocols:
    """The protocols ``config`` asks for on a cluster with ``caps``; an explicit ask the
    cluster cannot serve is a ``FatalError`` naming what it lacks."""
    if config.group_protocol == "consumer" and not caps.kip848:
        raise FatalError(
            "group_protocol 'consumer' needs the consumer group protocol (KIP-848: "
            f"Kafka 4.0+ with group.version >= 1); this broker: {caps.describe()}"
        )
    group: Literal["classic", "consumer"] = "classic"
    if config.group_protocol == "consumer" or (config.group_protocol == "auto" and caps.kip848):
        group = "consumer"
    return Protocols(group, txn_v2(config, caps))


def txn_v2(config: EosConfig, caps: ak.Capabilities) -> bool:
    """Whether transactions go v2 on a cluster with ``caps``: asked again at each
    recovery, since ``transaction.version`` can be lowered while the app runs."""
    if config.transactions_v2 == "on" and not caps.txn_v2:
        raise FatalError(
            "transactions_v2 'on' needs transactions v2 (KIP-890 part 2: Kafka 4.0+ with "
            f"transaction.version >= 2); this broker: {caps.describe()}"
        )
    return config.transactions_v2 == "on" or (config.transactions_v2 == "auto" and caps.txn_v2)


async def detect(
    config: EosConfig, producer: AIOKafkaProducer
) -> tuple[ak.Capabilities, Protocols]:
    """At start: ApiVersions of any broker, the protocols chosen, ``producer`` switched."""
    with ak.mapped("ApiVersions"):
        caps = await ak.capabilities(producer)
    chosen = choose(config, caps)
    log.info(
        "broker capabilities: %s; group protocol %s, transactions v%d",
        caps.describe(),
        chosen.group,
        2 if chosen.txn_v2 else 1,
    )
    ak.use_transactions_v2(producer, chosen.txn_v2)
    return caps, chosen


async def recheck(
    config: EosConfig, producer: AIOKafkaProducer, was: Protocols
) -> tuple[ak.Capabilities, Protocols]:
    """At a recovery, for the replacement ``producer``: ApiVersions again, and
    transactions v2 chosen again (the group protocol stays: changing it needs a new
    member). Brokers go on serving v2 requests from ``transaction.version`` 1 on (genuine
    4.4.0 did, though 1 tells clients to send v1) and refuse Produce v12 at 0: a lowering
    ends in a recovery at the latest when the cluster refuses, and from a recovery the
    session follows the cluster."""
    with ak.mapped("ApiVersions"):
        caps = await ak.capabilities(producer)
    now = replace(was, txn_v2=txn_v2(config, caps))
    if now.txn_v2 != was.txn_v2:
        log.warning(
            "the cluster's transactions changed (%s): transactions v%d from now on",
            caps.describe(),
            2 if now.txn_v2 else 1,
        )
    ak.use_transactions_v2(producer, now.txn_v2)
    return caps, now
