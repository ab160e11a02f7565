"""Topics a stateful app needs: the input topics' partition counts, and its changelog
topics created (compacted) or checked, over the producer's own connections.

- ``partition_counts``: each topic's partitions from the producer's metadata; a topic
  without metadata within the timeout does not exist (``FatalError`` naming it).
- ``ensure_compacted``: CreateTopics (``cleanup.policy=compact``, the given replication
  factor, -1 for the broker's default) for every changelog, sent to the controller (a
  ZooKeeper-era broker answers NOT_CONTROLLER elsewhere; KRaft brokers forward). One
  that exists already (TOPIC_ALREADY_EXISTS, also when another instance created it a
  moment before) is checked instead: its partition count must equal its input's and
  its ``cleanup.policy`` must include ``compact``, else a one-line ``ConfigError``; a
  refused CREATE is an ``AuthorizationError`` saying the topic may be created
  beforehand. Retriable answers are retried with a growing backoff until the timeout,
  then ``TransientError``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from aiokafka import AIOKafkaProducer
from aiokafka.protocol.admin import CreateTopicsRequest, DescribeConfigsRequest

from .._errors import AuthorizationError, ConfigError, FatalError, TransientError
from .._protocol import codes
from ._errors import TRANSIENT_CODES, error_name, mapped
from ._partitioner import wait_on_metadata

log = logging.getLogger("eosflow.adapter")

_TOPIC_RESOURCE = 2
_RETRIABLE = TRANSIENT_CODES | {codes.NOT_CONTROLLER}


async def partition_counts(
    producer: AIOKafkaProducer, topics: list[str], timeout_s: float
) -> dict[str, int]:
    client = producer.client
    out: dict[str, int] = {}
    for topic in topics:
        try:
            async with asyncio.timeout(timeout_s):
                with mapped(f"metadata of topic {topic!r}", "READ"):
                    await wait_on_metadata(client, topic)
        except TimeoutError:
            raise FatalError(
                f"topic {topic!r} has no metadata after {timeout_s:g} s: it does not exist"
            ) from None
        parts = client.cluster.partitions_for_topic(topic)
        if not parts:
            raise FatalError(f"topic {topic!r} does not exist")
        out[topic] = len(parts)
    return out


async def ensure_compacted(
    producer: AIOKafkaProducer,
    wanted: Mapping[str, tuple[str, int]],
    replication: int,
    timeout_s: float,
) -> list[str]:
    """Make every topic of ``wanted`` (changelog -> (its input topic, partitions)) exist,
    compacted, with that many partitions. Returns the topics it created."""
    client = producer.client
    deadline = time.monotonic() + timeout_s
    backoff = 0.05
    pending = dict(wanted)
    created: list[str] = []
    existing: list[str] = []
    while pending:
        requests: list[tuple[object, ...]] = [
            (name, n, replication, [], [("cleanup.policy", "compact")])
            for name, (_input, n) in pending.items()
        ]
        with mapped("creating changelog topics (CreateTopics)"):
            node = _controller(client)
            resp = await client.send(node, CreateTopicsRequest(requests, 30_000, False))
        retry: dict[str, tuple[str, int]] = {}
        answered = {entry["topic"] for entry in resp.to_object()["topic_errors"]}
        for name in pending:
            if name not in answered:
                raise FatalError(
                    f"creating changelog topic {name}: the broker did not answer for it"
                )
        for entry in resp.to_object()["topic_errors"]:
            name, code = entry["topic"], entry["error_code"]
            message = entry.get("error_message")
            if code == 0:
                created.append(name)
            elif code == codes.TOPIC_ALREADY_EXISTS:
                existing.append(name)
            elif code in (codes.TOPIC_AUTHORIZATION_FAILED, codes.CLUSTER_AUTHORIZATION_FAILED):
                raise AuthorizationError(
                    "creating changelog topics",
                    "CREATE",
                    f"topic {name}",
                    f"{error_name(code)}; or create it beforehand: "
                    f"{pending[name][1]} partitions, cleanup.policy=compact",
                )
            elif code in _RETRIABLE:
                retry[name] = pending[name]
                if code == codes.NOT_CONTROLLER:
                    with mapped("metadata (looking for the controller)"):
                        await client.force_metadata_update()
            else:
                raise FatalError(
                    f"creating changelog topic {name}: {error_name(code)}"
                    f"{': ' + message if message else ''}"
                )
        pending = retry
        if pending:
            if time.monotonic() + backoff > deadline:
                raise TransientError("creating changelog topics", f"{sorted(pending)} not created")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
    if created:
        log.info("created changelog topics %s", sorted(created))
    if existing:
        await _check(producer, {n: wanted[n] for n in existing}, timeout_s)
    return created


async def _check(
    producer: AIOKafkaProducer, topics: Mapping[str, tuple[str, int]], timeout_s: float
) -> None:
    """Existing changelogs must have their input's partition count and be compacted."""
    counts = await partition_counts(producer, sorted(topics), timeout_s)
    for name, (source, n) in sorted(topics.items()):
        if counts[name] != n:
            raise ConfigError(
                f"changelog topic {name} has {counts[name]} partitions but its input "
                f"{source} has {n}: a store needs one changelog partition per input "
                "partition (delete the changelog to rebuild it, or restore the input's count)"
            )
    client = producer.client
    resources = [(_TOPIC_RESOURCE, name, ["cleanup.policy"]) for name in sorted(topics)]
    with mapped("checking changelog topics (DescribeConfigs)"):
        resp = await client.send(client.get_random_node(), DescribeConfigsRequest(resources))
    for res in resp.to_object()["resources"]:
        name, code = res["resource_name"], res["error_code"]
        if code == codes.TOPIC_AUTHORIZATION_FAILED:
            raise AuthorizationError(
                "checking changelog topics", "DESCRIBE_CONFIGS", f"topic {name}", error_name(code)
            )
        if code != 0:
            raise TransientError(f"DescribeConfigs of {name}", error_name(code))
        policy = {e["config_names"]: e["config_value"] for e in res["config_entries"]}.get(
            "cleanup.policy", "delete"
        )
        if [p.strip() for p in (policy or "").split(",")] != ["compact"]:
            raise ConfigError(
                f"changelog topic {name} has cleanup.policy={policy}: a changelog must be "
                "compacted only (cleanup.policy=compact); with delete, keys not written "
                "within the retention are gone from it, and a restore would miss them"
            )


def _controller(client: object) -> int:
    cluster = client.cluster  # type: ignore[attr-defined]
    controller = getattr(cluster, "controller", None)
    if controller is not None:
        return int(controller.nodeId)
    return int(client.get_random_node())  # type: ignore[attr-defined]
