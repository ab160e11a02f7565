"""``python -m eosflow.testing`` in its own process: topic auto-creation on and off."""

from __future__ import annotations

import asyncio
import signal
import sys

import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from eosflow._protocol import _codes as codes


def _batch() -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    builder.append(0, timestamp=None, key=None, value=b"x", headers=[])
    return bytes(builder.build())


async def _metadata_then_produce(bootstrap: str, topic: str) -> tuple[int, int]:
    """The Metadata error for ``topic`` (auto-creation allowed by the client, as aiokafka's
    producer asks), then the Produce error for its partition 0."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        node = client.get_random_node()
        meta = await client.send(node, MetadataRequest([topic], allow_auto_topic_creation=True))
        (meta_code,) = [t[0] for t in meta.topics if t[1] == topic]
        produced = await client.send(
            node, ProduceRequest(None, -1, 30000, [(topic, [(0, _batch())])])
        )
        produce_code: int = produced.topics[0][1][0][1]
        return meta_code, produce_code
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], (codes.NONE, codes.NONE)),
        (
            ["--no-auto-create-topics"],
            (codes.UNKNOWN_TOPIC_OR_PARTITION, codes.UNKNOWN_TOPIC_OR_PARTITION),
        ),
    ],
    ids=["default-auto-create", "no-auto-create"],
)
async def test_auto_create_flag_of_the_cluster_process(
    flags: list[str], expected: tuple[int, int]
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eosflow.testing",
        "--port",
        "0",
        *flags,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith("BOOTSTRAP 127.0.0.1:"), line
        bootstrap = line.split()[1]
        assert await _metadata_then_produce(bootstrap, "unknown-topic") == expected
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 30)
    assert code == 0, "the cluster process stops cleanly on SIGTERM"
