"""``eosflow produce`` and ``eosflow consume``: records into a topic from lines, and a
topic's committed records out as lines -- what ``kcat`` and Kafka's console tools do,
for trying eosflow and looking at what it wrote, with nothing else installed.

- ``produce``: one record per line of standard input, sent as the lines come (so typing
  works as well as a pipe), with acks from every in-sync replica and idempotence. A
  line is the value; with ``key_separator`` the text before its first occurrence is the
  key; with ``json_lines`` each line is an object ``{"key", "value", "headers",
  "timestamp_ms", "partition"}`` (all optional; a value that is not a string is written
  as its JSON, ``null`` is a tombstone). ``headers`` go on every record.
- ``consume``: every partition of the topic read as read_committed (what a downstream
  consumer sees: no aborted and no still-open transaction's records), from the start or
  the end, one line per record -- its value, ``key<separator>value``, or a JSON object
  with its coordinates, timestamp and headers -- until ``count`` records, ``idle_s``
  without one, or a stop (SIGINT, SIGTERM). Bytes that are not UTF-8 are shown escaped.

Every failure is an eosflow error naming the step (the adapter's ``mapped``); the topic
not existing is one line after the metadata wait.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from aiokafka import TopicPartition

from .. import _aiokafka as ak
from .._errors import ConfigError
from .._security import KafkaSecurity

__all__ = ["Endpoint", "consume", "produce"]

_SEND_WINDOW = 1000  # sends awaited in batches of this many (acks pipelined)


@dataclass(frozen=True)
class Endpoint:
    bootstrap_servers: str
    security: KafkaSecurity


async def produce(
    where: Endpoint,
    topic: str,
    read_line: Callable[[], Awaitable[str]],
    *,
    key_separator: str | None = None,
    json_lines: bool = False,
    headers: Sequence[tuple[str, bytes]] = (),
) -> int:
    """Send one record per line ``read_line`` gives (``""``: the end); returns how many
    were acknowledged. A line that is not what ``json_lines`` asks is a ``ConfigError``
    naming its number."""
    producer = ak.plain_producer(
        where.bootstrap_servers, where.security, acks="all", enable_idempotence=True
    )
    await ak.start(producer, where, f"connecting to produce to {topic}", "WRITE")
    sent: list[asyncio.Future[Any]] = []
    count = 0
    try:
        with ak.mapped(f"producing to {topic}", "WRITE"):
            number = 0
            while line := await read_line():
                number += 1
                text = line.rstrip("\r\n")
                if not text and not json_lines:
                    continue
                record = _record(text, number, key_separator, json_lines, headers)
                sent.append(await producer.send(topic, **record))
                if len(sent) >= _SEND_WINDOW:
                    count += len(await asyncio.gather(*sent))
                    sent.clear()
            count += len(await asyncio.gather(*sent))
    finally:
        await ak.close_producer(producer, timeout_s=10.0)
    return count


def _record(
    text: str,
    number: int,
    key_separator: str | None,
    json_lines: bool,
    headers: Sequence[tuple[str, bytes]],
) -> dict[str, Any]:
    if not json_lines:
        key: bytes | None = None
        if key_separator is not None and key_separator in text:
            head, _, text = text.partition(key_separator)
            key = head.encode()
        return {"value": text.encode(), "key": key, "headers": list(headers) or None}
    try:
        obj = json.loads(text)
    except ValueError:
        raise ConfigError(f"line {number} is not JSON") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"line {number}: a JSON object with key, value, headers... expected")
    value = obj.get("value")
    all_headers = [*headers, *((k, _bytes(v)) for k, v in (obj.get("headers") or {}).items())]
    return {
        "value": None if value is None else _bytes(value),
        "key": None if obj.get("key") is None else _bytes(obj["key"]),
        "headers": all_headers or None,
        "timestamp_ms": obj.get("timestamp_ms"),
        "partition": obj.get("partition"),
    }


def _bytes(value: object) -> bytes:
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


async def consume(
    where: Endpoint,
    topic: str,
    out: TextIO,
    stop: asyncio.Event,
    *,
    from_end: bool = False,
    count: int | None = None,
    idle_s: float | None = None,
    key_separator: str | None = None,
    json_lines: bool = False,
) -> int:
    """Print ``topic``'s committed records to ``out`` (see the module); returns how
    many were printed."""
    consumer = ak.plain_consumer(
        where.bootstrap_servers,
        where.security,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="latest" if from_end else "earliest",
    )
    await ak.start(consumer, where, f"connecting to consume {topic}", "READ")
    printed = 0
    try:
        with ak.mapped(f"consuming {topic}", "READ"):
            parts = await ak.topic_partitions(consumer, topic, timeout_s=10.0)
            consumer.assign([TopicPartition(topic, p) for p in parts])
            last = time.monotonic()
            while not stop.is_set() and (count is None or printed < count):
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for r in records:
                        if count is not None and printed >= count:
                            break
                        out.write(_line(r, key_separator, json_lines) + "\n")
                        printed += 1
                if batch:
                    out.flush()
                    last = time.monotonic()
                elif idle_s is not None and time.monotonic() - last >= idle_s:
                    break
    finally:
        await ak.close_consumer(consumer, timeout_s=10.0)
    return printed


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="backslashreplace")


def _line(record: Any, key_separator: str | None, json_lines: bool) -> str:
    if json_lines:
        return json.dumps(
            {
                "partition": record.partition,
                "offset": record.offset,
                "timestamp_ms": record.timestamp,
                "key": None if record.key is None else _text(record.key),
                "value": None if record.value is None else _text(record.value),
                "headers": {k: _text(v) for k, v in record.headers or ()},
            }
        )
    if key_separator is not None:
        return f"{_text(record.key)}{key_separator}{_text(record.value)}"
    return _text(record.value)


def stdin_lines() -> Callable[[], Awaitable[str]]:
    """Lines of standard input, read in a thread so the event loop goes on meanwhile."""
    loop = asyncio.get_running_loop()
    return lambda: loop.run_in_executor(None, sys.stdin.readline)


def produce_command(args: Any, security: KafkaSecurity) -> int:
    """``eosflow produce`` (its arguments parsed by ``_cli``): standard input to a topic."""
    headers = []
    for given in args.header:
        name, eq, value = given.partition("=")
        if not eq or not name:
            raise ConfigError(f"--header {given!r}: NAME=VALUE expected")
        headers.append((name, value.encode()))
    where = Endpoint(args.bootstrap_servers, security)

    async def run() -> int:
        return await produce(
            where,
            args.topic,
            stdin_lines(),
            key_separator=args.key_separator,
            json_lines=args.json,
            headers=headers,
        )

    _quiet_aiokafka(args)
    sent = asyncio.run(run())
    print(f"eosflow: {sent} record{'' if sent == 1 else 's'} to {args.topic}", file=sys.stderr)
    return 0


def _quiet_aiokafka(args: Any) -> None:
    """aiokafka's INFO lines (subscriptions, coordinators) are no news in a tool's output:
    shown from WARNING on, unless ``--log-level debug``."""
    if getattr(args, "log_level", "info") != "debug":
        logging.getLogger("aiokafka").setLevel(logging.WARNING)


def consume_command(args: Any, security: KafkaSecurity) -> int:
    """``eosflow consume``: a topic's committed records to standard output, until
    ``--count``, ``--idle-s`` or SIGINT/SIGTERM."""
    where = Endpoint(args.bootstrap_servers, security)

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await consume(
            where,
            args.topic,
            sys.stdout,
            stop,
            from_end=args.from_ == "end",
            count=args.count,
            idle_s=args.idle_s,
            key_separator=args.key_separator,
            json_lines=args.json,
        )

    _quiet_aiokafka(args)
    asyncio.run(run())
    return 0
