"""A crashed earlier instance of an app's transactional id, still a member of its classic
group, is removed by the instance that replaced it (``eosflow/_engine/_predecessors``),
on every broker of the ladder -- genuine 2.4.1 included, where such a member may hold its
partitions for ever (KAFKA-9752)."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from fleet import committed_total
from kit import RawGroup, create_topic, eventually, log_seen

import eosflow
from eosflow.testing import check_exactly_once
from eosflow.testing._ladder import Broker

RECORDS, PARTITIONS = 400, 4


class Copy(eosflow.Processor):
    def __init__(self, output: str) -> None:
        self.output = output

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        return eosflow.Output(self.output, record.value, key=record.key)


# The ghost: a member whose client id names the app's transactional id and an earlier
# start, as a killed instance's would, joining the app's group (roundrobin, subscribed to
# the input) and then silent -- no SyncGroup, no heartbeat, a 60 s session -- as a member
# killed between JoinGroup and SyncGroup. Its share of the partitions would wait 60 s (for
# ever on 2.4.1) for anyone to process them. Caught: no sweep after the assignment
# (ClassicGroup without ``_sweep_predecessors``): the records of the ghost's partitions
# stayed uncommitted past the 25 s bound.
async def test_a_crashed_predecessor_is_removed_and_its_partitions_taken_over(
    eosflow_broker: Broker,
) -> None:
    b = eosflow_broker
    src, dst, group, tx = b.unique("in"), b.unique("out"), b.unique("g"), b.unique("tx")
    await create_topic(b.bootstrap_servers, src, PARTITIONS)
    await create_topic(b.bootstrap_servers, dst, 1)
    session_s = max(b.min_session_timeout_s, 6.0)
    cfg = eosflow.EosConfig(
        bootstrap_servers=b.bootstrap_servers,
        group_id=group,
        input_topics=(src,),
        transactional_id=tx,
        group_protocol="classic",
        session_timeout_s=session_s,
        heartbeat_interval_s=session_s / 10,
        transaction_timeout_s=session_s * 0.8,
    )
    app = eosflow.EosApp(Copy(dst), cfg)
    ghost = RawGroup(b.bootstrap_servers, group, client_id=f"{cfg.client_id}-{tx}-1")
    with log_seen("eosflow.session", f"removed {cfg.client_id}-{tx}-1 ") as removed:
        async with app:
            await eventually(
                lambda: _holds(app, PARTITIONS), timeout_s=60, what="the app holds all"
            )
            await ghost.start()
            try:
                subscription = ConsumerProtocolMemberMetadata(0, [src], b"").encode()
                joined = await ghost.join(
                    session_ms=60_000, rebalance_ms=60_000, protocol=("roundrobin", subscription)
                )
                assert joined["error_code"] == 0, joined
                if joined["leader_id"] == joined["member_id"]:  # then it assigns, and is silent
                    await ghost.sync(
                        int(joined["generation_id"]),  # type: ignore[call-overload]
                        str(joined["member_id"]),
                        assignments=_halves(joined, src),
                    )
                await _seed(b.bootstrap_servers, src)

                async def all_committed() -> bool:
                    assert app.failure is None, app.failure
                    done = await committed_total(b.bootstrap_servers, src, PARTITIONS, group)
                    return done >= RECORDS

                await eventually(all_committed, timeout_s=25, what="every record committed")
            finally:
                await ghost.close()
    assert removed.is_set()
    report = await check_exactly_once(b.bootstrap_servers, src, dst, group_id=group)
    assert report.ok, report.summary()


async def _holds(app: eosflow.EosApp, n: int) -> bool:
    assert app.failure is None, app.failure
    return len(app.assigned) == n


def _halves(joined: dict[str, object], topic: str) -> dict[str, bytes]:
    """The ghost as leader: half the partitions to each member, in member order."""
    members = sorted(str(m["member_id"]) for m in joined["members"])  # type: ignore[attr-defined]
    out: dict[str, list[int]] = {m: [] for m in members}
    for p in range(PARTITIONS):
        out[members[p % len(members)]].append(p)
    return {
        m: ConsumerProtocolMemberAssignment(0, [(topic, ps)], b"").encode() for m, ps in out.items()
    }


async def _seed(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        sends = [
            await producer.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % PARTITIONS)
            for i in range(RECORDS)
        ]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()
