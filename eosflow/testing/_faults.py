"""Fault injection for the test cluster, in the spirit of franz-go kfake's ControlKey.

A test intercepts requests of one API, optionally only those from one client id, group or
transactional id, for the next N matches or every one, and makes the cluster:

- answer with an error code instead of handling the request (no side effect); Metadata
  carries errors per topic, so an error rule for it matches only requests naming topics
  and answers each of them with the error (no partitions), as Kafka does;
- delay handling by some seconds;
- hold the request until the test calls ``release()`` (``await rule.matched()`` tells when);
- drop the connection instead of answering (the request is not applied), or
- apply the request and then drop the connection, losing the answer: the client cannot
  know the outcome (the EndTxn-outcome-unknown case).

Rules are matched in the order they were added; an exhausted rule is removed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from .._timeouts import within
from . import _codec

__all__ = ["FaultRule"]

_GROUP_KEYS = ("group_id", "group", "consumer_group", "coordinator_key")
_METADATA = 3
_OFFSET_FETCH = 9


@dataclass(eq=False)
class FaultRule:
    api_key: int
    error: int | None = None
    delay_s: float = 0.0
    hold: bool = False
    drop: bool = False
    drop_response: bool = False
    times: int | None = 1
    client_id: str | None = None
    version: int | None = None
    group_id: str | None = None
    transactional_id: str | None = None
    hits: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)  # what matched, in order
    _matched: asyncio.Event = field(default_factory=asyncio.Event)
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    def matches(self, frame: _codec.Frame) -> bool:
        if frame.api_key != self.api_key:
            return False
        if self.client_id is not None and frame.client_id != self.client_id:
            return False
        if self.version is not None and frame.version != self.version:
            return False
        body = frame.body
        if frame.api_key == _METADATA and self.error is not None and not body.get("topics"):
            return False  # nowhere to put the error: Metadata errors are per topic
        if self.group_id is not None:
            if not any(body.get(k) == self.group_id for k in _GROUP_KEYS):
                return False
        if self.transactional_id is not None:
            if body.get("transactional_id") != self.transactional_id:
                return False
        return True

    async def matched(self, timeout_s: float = 10.0) -> None:
        """Wait until a request has matched this rule."""
        await within(self._matched.wait(), timeout_s)

    def release(self) -> None:
        """Let held requests through (they are then handled normally)."""
        self._released.set()

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times


def error_body(
    frame: _codec.Frame, code: int, brokers: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A response of the frame's API that carries ``code`` wherever the schema has an
    error code, mirroring the request's topics and partitions so the client can map it.
    Metadata is the exception: it lists the ``brokers``, and each topic named carries the
    error and no partitions; so is OffsetFetch v8+, whose groups each carry it."""
    if frame.api_key == _METADATA:
        names = [t["name"] for t in frame.body.get("topics") or []]
        return {
            "brokers": brokers or [],
            "controller_id": -1,
            "topics": [
                {"error_code": code, "topic": n, "is_internal": False, "partitions": []}
                for n in names
            ],
        }
    if frame.api_key == _OFFSET_FETCH and frame.version >= 8:  # per group, as Kafka answers
        groups = frame.body.get("groups") or []
        return {
            "groups": [
                {"group_id": g["group_id"], "topics": [], "error_code": code} for g in groups
            ]
        }
    schema = _codec.response_schema(frame.api_key, frame.version)
    body: dict[str, Any] = {"error_code": code}
    topics_field = _array_field(schema)
    if topics_field is None:
        if frame.api_key in (11,):  # JoinGroup: no generation on error
            body.update(generation_id=-1, member_id=frame.body.get("member_id", ""))
        return body
    name, topic_schema = topics_field
    req_topics = frame.body.get("topics") or []
    out_topics = []
    for t in req_topics:
        tname = t.get("name", t.get("topic"))
        parts = t.get("partitions", t.get("partition_indexes", []))
        idxs = [
            p if isinstance(p, int) else p.get("partition", p.get("partition_index")) for p in parts
        ]
        tfield = topic_schema.names[0]
        parr = _array_field(topic_schema)
        if parr is None:
            continue
        pname, pschema = parr
        pidx = pschema.names[0]
        out_topics.append(
            {
                tfield: tname,
                pname: [
                    {
                        pidx: i,
                        "error_code": code,
                        "offset": -1,
                        "committed_offset": -1,
                        "highwater_offset": -1,
                        "last_stable_offset": -1,
                        "log_start_offset": -1,
                        "preferred_read_replica": -1,
                        "timestamp": -1,
                    }
                    for i in idxs
                ],
            }
        )
    body[name] = out_topics
    return body


def _array_field(schema: Any) -> tuple[str, Any] | None:
    from aiokafka.protocol.types import Array, Schema

    for n, f in zip(schema.names, schema.fields, strict=True):
        if isinstance(f, Array) and isinstance(f.array_of, Schema):
            return n, f.array_of
    return None
