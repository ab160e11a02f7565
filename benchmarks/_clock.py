"""The clock every contender of ``compare.py`` is timed by.

A run lasts from the contender's first record processed to the moment its group's
committed offsets, read by an admin client every ``POLL_S``, reach the end of the input:
the copy is then committed and visible to any reader. Every contender is timed so --
the Python ones with ``Finish`` below, the Java ones (Kafka Streams, Kafka's copier) with
the same loop in ``java/Bench.java`` -- and the polling starts only once the contender
has processed its last record, so it costs nothing while the contender works.

Until 2026-11-27 each contender stopped its own clock: eosflow at its last EndTxn answer,
the loops when their last commit returned, quixstreams after its shutdown, Kafka Streams
as here; the marker writes after EndTxn (8-62 ms at p99, ``benchmarks offset-visibility``)
counted against Kafka Streams alone, and quixstreams' shutdown against it.
"""

from __future__ import annotations

import asyncio
import threading
import time

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

POLL_S = 0.005
TIMEOUT_S = 120.0


class Finish:
    """``Finish(boot, group, topic, n)`` connects an admin client in a thread of its own
    at once; ``begin()`` once the contender has processed its last record; ``at()`` waits
    until the group's committed offsets of ``topic`` add up to ``n`` (each input partition
    starts at offset 0) and returns the ``time.monotonic()`` they were first seen so."""

    def __init__(self, boot: str, group: str, topic: str, n: int) -> None:
        self._boot, self._group, self._topic, self._n = boot, group, topic, n
        self._begun = threading.Event()
        self._result: float | BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="finish", daemon=True)
        self._thread.start()

    def begin(self) -> None:
        self._begun.set()

    def at(self) -> float:
        self._begun.set()
        self._thread.join(TIMEOUT_S + 30)
        if isinstance(self._result, float):
            return self._result
        if self._result is None:
            raise TimeoutError(f"{self._group}'s offsets did not reach {self._n:,}")
        raise self._result

    def _run(self) -> None:
        """Connect at once; then, blocked until ``begin()`` (the loop idle, its
        connections open), poll."""
        loop = asyncio.new_event_loop()
        admin: AIOKafkaAdminClient | None = None
        try:
            admin, coordinator = loop.run_until_complete(self._connect())
            self._begun.wait()
            self._result = loop.run_until_complete(self._watch(admin, coordinator))
        except BaseException as exc:  # handed to at()
            self._result = exc
        finally:
            if admin is not None:
                loop.run_until_complete(admin.close())
            loop.close()

    async def _connect(self) -> tuple[AIOKafkaAdminClient, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=self._boot)
        await admin.start()
        deadline = time.monotonic() + TIMEOUT_S
        return admin, await _coordinator(admin, self._group, deadline)

    async def _watch(self, admin: AIOKafkaAdminClient, coordinator: int) -> float:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            offsets = await admin.list_consumer_group_offsets(
                self._group, group_coordinator_id=coordinator
            )
            seen = sum(o.offset for tp, o in offsets.items() if tp.topic == self._topic)
            if seen >= self._n:
                return time.monotonic()
            await asyncio.sleep(POLL_S)
        raise TimeoutError(f"{self._group}'s offsets did not reach {self._n:,}")


async def _coordinator(admin: AIOKafkaAdminClient, group: str, deadline: float) -> int:
    """The group's coordinator, once the broker has one (a fresh broker answers
    COORDINATOR_NOT_AVAILABLE until ``__consumer_offsets`` exists)."""
    while True:
        try:
            return await admin.find_coordinator(group)
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def p50_p99(samples: list[float]) -> tuple[float, float]:
    """The median and the 99th percentile of ``samples`` (nearest rank, sorted in place):
    the latency run's end-to-end figures and eosflow's commit steps are taken so."""
    samples.sort()
    return samples[len(samples) // 2], samples[int(len(samples) * 0.99)]
