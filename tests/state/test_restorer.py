"""The restorer on its own, against the test cluster: a real read_committed consumer and
a real local copy, driven through its jobs (as the session does on assignment and
recovery). The comment above each test names the mutation that made it fail."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiokafka import AIOKafkaProducer

import eosflow
from eosflow._state._changelog import encode_position
from eosflow._state._local import Env, LocalPartition
from eosflow._state._restore import Job, Restorer
from eosflow._state._store import RESERVED_KEY
from eosflow.testing import FakeCluster

KEYS = 3000


# A job replaced while a fetch is under way (a recovery restarts every restore) must not
# take the records that fetch brings: they come from the old job's position, and the new
# job may have wiped the store (a checkpoint with data and no position record yet, as a
# restore of a compacted changelog has for most of its way). Caught: applying a fetched
# batch to a target not yet positioned (the keys before the old position were lost).
async def test_a_job_replaced_mid_fetch_does_not_take_the_old_fetch(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    c.create_topic("cl", 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, linger_ms=5)
    await p.start()
    try:
        for i in range(KEYS):  # ~6 MB: more than one 4 MB fetch
            await p.send("cl", b"v" * 2048, key=b"k%d" % i, partition=0)
        await p.send("cl", encode_position(KEYS), key=RESERVED_KEY, partition=0)
        await p.flush()
    finally:
        await p.stop()
    c.intercept("Fetch", client_id="eosflow-restore", delay_s=0.0)  # the first passes
    held = c.intercept("Fetch", client_id="eosflow-restore", hold=True)
    cfg = eosflow.EosConfig(
        bootstrap_servers=c.bootstrap_servers,
        group_id="g",
        input_topics=("in",),
        transactional_id="t",
        state_dir=str(tmp_path),
    )
    ready: list[tuple[str, int]] = []
    failed: list[Exception] = []
    restorer = Restorer(cfg, ready.append, failed.append, wait_s=30.0)
    local = LocalPartition(tmp_path, ("in", 0), ["counts"], Env())
    try:
        restorer.add(Job(("in", 0), local, KEYS), {"counts": "cl"})
        await held.matched(timeout_s=30)  # the first batch is applied, the second held
        partial = local.checkpoint("counts")
        assert 0 < partial.offset < KEYS and partial.marker == -1, partial
        restorer.add(Job(("in", 0), local, KEYS), {"counts": "cl"})  # wipes: unverifiable
        held.release()
        deadline = asyncio.get_running_loop().time() + 30
        while not ready and not failed:
            assert asyncio.get_running_loop().time() < deadline, "not restored"
            await asyncio.sleep(0.05)
        assert not failed, failed
        missing = [i for i in range(KEYS) if local.get("counts", b"k%d" % i) is None]
        assert missing == [], f"{len(missing)} keys lost, from k{missing[0]}"
    finally:
        await restorer.stop()
        local.close()


# A committed offset's metadata names the changelog offset of the last record its
# transaction wrote: the restore is done only once it has read past it, even when the
# store's position already equals the committed offset -- a transaction that fired a
# wall-clock timer commits the offset again without moving it, and its commit markers may
# land after the next owner's offset fetch. Caught: the restore done on the position
# alone (the job ready while the transaction was still open: the timer's deletion lost).
async def test_the_restore_reads_past_what_the_committed_transaction_wrote(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    c.create_topic("cl", 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id="w")
    await p.start()
    try:
        async with p.transaction():  # a record's transaction: a timer, the position 10
            await p.send("cl", b"due", key=b"timer", partition=0)
            await p.send("cl", encode_position(10), key=RESERVED_KEY, partition=0)
        await p.begin_transaction()  # the fire's: the timer deleted, the position as it was
        sent = await (await p.send("cl", None, key=b"timer", partition=0))
        cfg = eosflow.EosConfig(
            bootstrap_servers=c.bootstrap_servers,
            group_id="g",
            input_topics=("in",),
            transactional_id="t",
            state_dir=str(tmp_path),
        )
        ready: list[tuple[str, int]] = []
        failed: list[Exception] = []
        restorer = Restorer(cfg, ready.append, failed.append, wait_s=30.0)
        local = LocalPartition(tmp_path, ("in", 0), ["s"], Env())
        try:
            job = Job(("in", 0), local, 10, {"s": sent.offset})  # its offset's metadata
            restorer.add(job, {"s": "cl"})
            deadline = asyncio.get_running_loop().time() + 30
            while job.pending_since is None:  # read to the stable end: waiting for it
                assert not ready and not failed, (ready, failed)
                assert asyncio.get_running_loop().time() < deadline, "never waited"
                await asyncio.sleep(0.02)
            assert local.get("s", b"timer") == b"due"
            await p.commit_transaction()  # the markers land
            while not ready and not failed:
                assert asyncio.get_running_loop().time() < deadline, "not restored"
                await asyncio.sleep(0.02)
            assert not failed, failed
            assert local.get("s", b"timer") is None  # the deletion is in
        finally:
            await restorer.stop()
            local.close()
    finally:
        await p.stop()


# A committed offset's metadata naming a changelog offset past the changelog's end (the
# changelog deleted and recreated, or truncated, while the group's offsets stayed): the
# position alone decides, as before, rather than a wait that fails and fails again at
# every restart. Caught: waiting for the named offset whatever the changelog's end.
async def test_metadata_past_the_changelogs_end_falls_back_to_the_position(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    c.create_topic("cl", 1)
    p = AIOKafkaProducer(bootstrap_servers=c.bootstrap_servers, transactional_id="w")
    await p.start()
    try:
        async with p.transaction():
            await p.send("cl", b"1", key=b"k", partition=0)
            await p.send("cl", encode_position(10), key=RESERVED_KEY, partition=0)
    finally:
        await p.stop()
    cfg = eosflow.EosConfig(
        bootstrap_servers=c.bootstrap_servers,
        group_id="g",
        input_topics=("in",),
        transactional_id="t",
        state_dir=str(tmp_path),
    )
    ready: list[tuple[str, int]] = []
    failed: list[Exception] = []
    restorer = Restorer(cfg, ready.append, failed.append, wait_s=60.0)
    local = LocalPartition(tmp_path, ("in", 0), ["s"], Env())
    try:
        restorer.add(Job(("in", 0), local, 10, {"s": 12_345}), {"s": "cl"})
        deadline = asyncio.get_running_loop().time() + 20
        while not ready and not failed:
            assert asyncio.get_running_loop().time() < deadline, "waited for the metadata"
            await asyncio.sleep(0.02)
        assert not failed, failed
        assert local.get("s", b"k") == b"1"
    finally:
        await restorer.stop()
        local.close()
