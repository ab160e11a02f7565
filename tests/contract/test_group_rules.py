"""Broker contract: group rules driven by hand -- static membership, generation checks
on OffsetCommit, and the rebalance timeout for a member that does not rejoin."""

from __future__ import annotations

import asyncio
import time

from kit import RawGroup, create_topic, eventually

from eosflow._protocol import _codes as codes
from eosflow.testing._ladder import Broker


async def _stable_member(
    g: RawGroup, instance: str | None = None, rebalance_ms: int = 10000
) -> tuple[int, str]:
    joined = await g.join(instance_id=instance, rebalance_ms=rebalance_ms)
    assert joined["error_code"] == 0, joined
    gen, mid = int(joined["generation_id"]), str(joined["member_id"])  # type: ignore[call-overload]
    synced = await g.sync(gen, mid, instance, {mid: b""})
    assert synced["error_code"] == 0, synced
    return gen, mid


async def test_static_member_rejoining_fences_its_old_member_id(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    first, second = RawGroup(b.bootstrap_servers, b.unique("sg")), None
    await first.start()
    try:
        gen, old = await _stable_member(first, instance="instance-1")
        assert await first.heartbeat(gen, old, "instance-1") == 0
        second = RawGroup(b.bootstrap_servers, first.group)
        await second.start()
        rejoined = await second.join(instance_id="instance-1")
        assert rejoined["error_code"] == 0 and rejoined["member_id"] != old
        assert await first.heartbeat(gen, old, "instance-1") == codes.FENCED_INSTANCE_ID
    finally:
        await first.close()
        if second is not None:
            await second.close()


async def test_offset_commit_checks_member_and_generation(eosflow_broker: Broker) -> None:
    b = eosflow_broker
    topic = b.unique("oc")
    await create_topic(b.bootstrap_servers, topic)
    g = RawGroup(b.bootstrap_servers, b.unique("ocg"))
    await g.start()
    try:
        gen, mid = await _stable_member(g)
        assert await g.commit(gen, mid, topic, 3) == 0
        assert await g.commit(gen + 1, mid, topic, 4) == codes.ILLEGAL_GENERATION
        assert await g.commit(gen, "someone-else", topic, 4) == codes.UNKNOWN_MEMBER_ID
    finally:
        await g.close()


async def test_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(
    eosflow_broker: Broker,
) -> None:
    b = eosflow_broker
    silent = RawGroup(b.bootstrap_servers, b.unique("rt"))
    await silent.start()
    newcomer = RawGroup(b.bootstrap_servers, silent.group)
    await newcomer.start()
    try:
        session_ms = int(max(b.min_session_timeout_s, 1.0) * 1000) * 10
        joined = await silent.join(rebalance_ms=1000, session_ms=session_ms)
        gen, mid = int(joined["generation_id"]), str(joined["member_id"])  # type: ignore[call-overload]
        await silent.sync(gen, mid, None, {mid: b""})
        started = time.monotonic()
        joining = asyncio.create_task(newcomer.join(rebalance_ms=1000, session_ms=session_ms))

        async def rebalancing() -> bool:
            return await silent.heartbeat(gen, mid) == codes.REBALANCE_IN_PROGRESS

        await eventually(rebalancing, timeout_s=10, what="heartbeat says REBALANCE_IN_PROGRESS")
        answer = await joining
        waited = time.monotonic() - started
        assert answer["error_code"] == 0
        members = [m["member_id"] for m in answer["members"]]  # type: ignore[attr-defined]
        assert members == [answer["member_id"]], "the silent member was dropped"
        assert 0.8 <= waited < session_ms / 1000, f"join completed after {waited:.2f} s"
        assert await silent.heartbeat(gen, mid) in (
            codes.UNKNOWN_MEMBER_ID,
            codes.ILLEGAL_GENERATION,
        )
    finally:
        await silent.close()
        await newcomer.close()
