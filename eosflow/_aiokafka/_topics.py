"""Topics an app makes: the input topics' partition counts, and its changelog and
repartition topics created or checked, over the producer's own connections.

- ``partition_counts``: each topic's partitions from the producer's metadata; a topic
  without metadata within the timeout does not exist (``FatalError`` naming it).
- ``ensure_topics``: CreateTopics (the given configs -- a changelog's
  ``cleanup.policy=compact``, a repartition topic's ``delete`` -- and replication
  factor, -1 for the broker's default) for every topic wanted, sent to the controller (a
  ZooKeeper-era broker answers NOT_CONTROLLER elsewhere; KRaft brokers forward). One
  that exists already (TOPIC_ALREADY_EXISTS, also when another instance created it a
  moment before) is checked instead: its partition count must be the one wanted and
  its ``cleanup.policy`` the one given, else a one-line ``ConfigError``; a refused
  CREATE is an ``AuthorizationError`` saying the topic may be created beforehand.
  Retriable answers are retried with a growing backoff until the timeout, then
  ``TransientError``.
- ``delete_records``: DeleteRecords to each partition's leader, the records below the
  offsets given deleted (a pipeline's repartition topics, once committed past); any
  error is mapped (a partition whose leader moved: ``TransientError``, tried again at
  the next commit by the caller).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.protocol.admin import (
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DescribeConfigsRequest,
)

from .._errors import AuthorizationError, ConfigError, FatalError, TransientError
from .._protocol import codes
from ._errors import TRANSIENT_CODES, error_for, error_name, mapped
from ._partitioner import wait_on_metadata

log = logging.getLogger("eosflow.adapter")

_TOPIC_RESOURCE = 2
_RETRIABLE = TRANSIENT_CODES | {codes.NOT_CONTROLLER}


async def partition_counts(
    producer: AIOKafkaProducer, topics: list[str], timeout_s: float, exist: bool = False
) -> dict[str, int]:
    """Each topic's partition count from the producer's metadata, the topic tracked from
    now on. A topic without metadata after ``timeout_s`` does not exist (``FatalError``),
    unless it is known to (``exist``: just created or found by ``ensure_topics``): then
    its metadata is late -- a ZooKeeper broker's cache can lag a creation by seconds --
    and a start retries it (``TransientError``)."""
    client = producer.client
    out: dict[str, int] = {}
    for topic in topics:
        try:
            async with asyncio.timeout(timeout_s):
                with mapped(f"metadata of topic {topic!r}", "READ"):
                    await wait_on_metadata(client, topic)
        except TimeoutError:
            if exist:
                raise TransientError(
                    f"metadata of topic {topic!r}", f"none yet after {timeout_s:g} s"
                ) from None
            raise FatalError(
                f"topic {topic!r} has no metadata after {timeout_s:g} s: it does not exist"
            ) from None
        parts = client.cluster.partitions_for_topic(topic)
        if not parts:
            raise FatalError(f"topic {topic!r} does not exist")
        out[topic] = len(parts)
    return out


COMPACTED = (("cleanup.policy", "compact"),)


async def ensure_topics(
    producer: AIOKafkaProducer,
    wanted: Mapping[str, tuple[str, int]],
    replication: int,
    timeout_s: float,
    kind: str = "changelog",
    configs: tuple[tuple[str, str], ...] = COMPACTED,
) -> list[str]:
    """Make every topic of ``wanted`` (topic -> (what it serves, partitions)) exist with
    ``configs`` and that many partitions; ``kind`` names them in errors ("changelog",
    "repartition"). Returns the topics it created."""
    client = producer.client
    deadline = time.monotonic() + timeout_s
    backoff = 0.05
    pending = dict(wanted)
    created: list[str] = []
    existing: list[str] = []
    while pending:
        requests: list[tuple[object, ...]] = [
            (name, n, replication, [], list(configs)) for name, (_input, n) in pending.items()
        ]
        with mapped(f"creating {kind} topics (CreateTopics)"):
            node = _controller(client)
            resp = await client.send(node, CreateTopicsRequest(requests, 30_000, False))
        retry: dict[str, tuple[str, int]] = {}
        answered = {entry["topic"] for entry in resp.to_object()["topic_errors"]}
        for name in pending:
            if name not in answered:
                raise FatalError(f"creating {kind} topic {name}: the broker did not answer for it")
        for entry in resp.to_object()["topic_errors"]:
            name, code = entry["topic"], entry["error_code"]
            message = entry.get("error_message")
            if code == 0:
                created.append(name)
            elif code == codes.TOPIC_ALREADY_EXISTS:
                existing.append(name)
            elif code in (codes.TOPIC_AUTHORIZATION_FAILED, codes.CLUSTER_AUTHORIZATION_FAILED):
                raise AuthorizationError(
                    f"creating {kind} topics",
                    "CREATE",
                    f"topic {name}",
                    f"{error_name(code)}; or create it beforehand: "
                    f"{pending[name][1]} partitions, " + ", ".join(f"{k}={v}" for k, v in configs),
                )
            elif code in _RETRIABLE:
                retry[name] = pending[name]
                if code == codes.NOT_CONTROLLER:
                    with mapped("metadata (looking for the controller)"):
                        await client.force_metadata_update()
            else:
                raise FatalError(
                    f"creating {kind} topic {name}: {error_name(code)}"
                    f"{': ' + message if message else ''}"
                )
        pending = retry
        if pending:
            if time.monotonic() + backoff > deadline:
                raise TransientError(f"creating {kind} topics", f"{sorted(pending)} not created")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
    if created:
        log.info("created %s topics %s", kind, sorted(created))
    if existing:
        await _check(producer, {n: wanted[n] for n in existing}, timeout_s, kind, configs)
    return created


# why an existing topic's config must be what eosflow creates it with (beside
# cleanup.policy): one line each, naming the config and the way out
_MUST = {
    "retention.ms": "records a stage has not read yet would be deleted by age (eosflow "
    "deletes what the group committed past)",
    "message.timestamp.type": "the broker would stamp each record with its own time, "
    "losing the event time the regroup keeps",
}


async def _check(
    producer: AIOKafkaProducer,
    topics: Mapping[str, tuple[str, int]],
    timeout_s: float,
    kind: str,
    configs: tuple[tuple[str, str], ...],
) -> None:
    """Existing topics must have the partition count wanted, the ``cleanup.policy`` of
    ``configs`` and its other configs eosflow relies on (``_MUST``)."""
    wanted_policy = dict(configs).get("cleanup.policy", "delete")
    must = {k: v for k, v in configs if k in _MUST}
    counts = await partition_counts(producer, sorted(topics), timeout_s, exist=True)
    for name, (source, n) in sorted(topics.items()):
        if counts[name] != n and kind == "changelog":
            raise ConfigError(
                f"changelog topic {name} has {counts[name]} partitions but its input "
                f"{source} has {n}: a store needs one changelog partition per input "
                "partition (delete the changelog to rebuild it, or restore the input's count)"
            )
        if counts[name] != n:
            raise ConfigError(
                f"{kind} topic {name} has {counts[name]} partitions, but {source} wants {n}: "
                "set the stage's partitions to its count, or delete the topic (its records "
                "not yet read are lost then)"
            )
    client = producer.client
    asked = ["cleanup.policy", *must]
    resources = [(_TOPIC_RESOURCE, name, asked) for name in sorted(topics)]
    with mapped(f"checking {kind} topics (DescribeConfigs)"):
        resp = await client.send(client.get_random_node(), DescribeConfigsRequest(resources))
    for res in resp.to_object()["resources"]:
        name, code = res["resource_name"], res["error_code"]
        if code == codes.TOPIC_AUTHORIZATION_FAILED:
            raise AuthorizationError(
                f"checking {kind} topics", "DESCRIBE_CONFIGS", f"topic {name}", error_name(code)
            )
        if code != 0:
            raise TransientError(f"DescribeConfigs of {name}", error_name(code))
        found = {e["config_names"]: e["config_value"] for e in res["config_entries"]}
        for key, value in must.items():
            if found.get(key, value) != value:
                raise ConfigError(
                    f"{kind} topic {name} has {key}={found[key]}, not {value}: {_MUST[key]}; "
                    f"set {key}={value}, or delete the topic (its records not yet read are "
                    "lost then)"
                )
        policy = found.get("cleanup.policy", "delete")
        if [p.strip() for p in (policy or "").split(",")] == [wanted_policy]:
            continue
        if kind == "changelog":
            raise ConfigError(
                f"changelog topic {name} has cleanup.policy={policy}: a changelog must be "
                "compacted only (cleanup.policy=compact); with delete, keys not written "
                "within the retention are gone from it, and a restore would miss them"
            )
        raise ConfigError(
            f"{kind} topic {name} has cleanup.policy={policy}, not {wanted_policy}: "
            "compaction would keep only the last record of each key"
        )


async def delete_records(
    producer: AIOKafkaProducer, before: Mapping[tuple[str, int], int], timeout_s: float
) -> None:
    """Delete the records of each (topic, partition) of ``before`` below its offset: one
    DeleteRecords a leader, over the producer's connections."""
    client = producer.client
    unknown = sorted({t for t, _ in before} - set(client.cluster.topics()))
    if unknown:  # a topic this producer never wrote: its metadata first, then tracked
        await partition_counts(producer, unknown, timeout_s)
    by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for (topic, partition), offset in sorted(before.items()):
        leader = client.cluster.leader_for_partition(TopicPartition(topic, partition))
        if leader is None or leader < 0:
            raise TransientError(f"deleting records of {topic}[{partition}]", "no leader known")
        by_leader.setdefault(leader, {}).setdefault(topic, []).append((partition, offset))
    step = "deleting committed records (DeleteRecords)"
    for leader, topics in by_leader.items():
        request = DeleteRecordsRequest(list(topics.items()), int(timeout_s * 1000))
        with mapped(step, "DELETE"):
            async with asyncio.timeout(timeout_s):
                resp = await client.send(leader, request)
            for name, partitions, *_ in resp.topics:
                for index, _low, code, *_ in partitions:
                    if code:
                        raise error_for(code, f"{name}[{index}]")
    return None


def _controller(client: object) -> int:
    cluster = client.cluster  # type: ignore[attr-defined]
    controller = getattr(cluster, "controller", None)
    if controller is not None:
        return int(controller.nodeId)
    return int(client.get_random_node())  # type: ignore[attr-defined]
