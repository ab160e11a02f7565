"""Wall-clock timers (``timers.after``) on the test cluster: fired once while no record
comes, in a transaction of their own that commits the partition's offset again; their
deletion restored with the stores; one due during an outage fired after the restore; a
failing fire dead-lettered. The comment above each test names the mutation that made it
fail when the mechanism was taken out."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from stateful import changelog, state_config, until_committed

import eosflow
from eosflow._state._changelog import decode_written
from eosflow.testing import FakeCluster, read_topic

DUE_S = 0.3


class Reminder(eosflow.Processor):
    """``set``: a reminder ``DUE_S`` from now (``slow``: 2 s, ``far``: an hour);
    ``cancel``: cancelled;
    ``look``: what timers the key's partition holds for keys a and far, as an output."""

    async def process(self, record: eosflow.Record) -> eosflow.Output | None:
        key, what = record.key or b"", record.value or b""
        if what == b"set":
            self.timers.after(DUE_S, key, b"payload-" + key)
        elif what == b"slow":
            self.timers.after(2.0, key, b"payload-" + key)
        elif what == b"far":
            self.timers.after(3600, key)
        elif what == b"cancel":
            self.timers.cancel(key, wall_clock=True)
        elif what == b"look":
            seen = [k for k in (b"a", b"far") if self.timers.get(k, wall_clock=True)]
            return eosflow.Output("looks", b",".join(seen) or b"-")
        return None

    async def fire(self, timer: eosflow.Timer) -> eosflow.Output:
        assert timer.wall_clock
        if timer.key == b"boom":
            raise RuntimeError("fire failed")
        return eosflow.Output("fired", timer.payload, key=timer.key)


async def produce(bootstrap: str, records: list[tuple[bytes, bytes]]) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await p.start()
    try:
        for key, value in records:
            await p.send_and_wait("in", value, key=key, partition=0)
    finally:
        await p.stop()


async def until_read(bootstrap: str, topic: str, n: int, app: eosflow.EosApp) -> list[bytes]:
    """The keys of ``topic``'s committed records once there are ``n``, polled (failing
    after 30 s or when the app ended on an error)."""
    deadline = time.monotonic() + 30
    while len(got := await read_topic(bootstrap, topic)) < n:
        assert app.failure is None, app.failure
        assert time.monotonic() < deadline, f"{topic}: {len(got)} of {n} records"
        await asyncio.sleep(0.2)
    return [k or b"" for _p, _o, k, _v in got]


async def written_metadata(bootstrap: str) -> dict[str, int]:
    """What group g's committed offset of in[0] says its transaction wrote last."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets("g")
    finally:
        await admin.close()
    return decode_written(offsets[TopicPartition("in", 0)].metadata)


def cfg(c: FakeCluster, txn: str, state_dir: Path, **kw: object) -> eosflow.EosConfig:
    return state_config(c.bootstrap_servers, "g", "in", txn, state_dir, commit_interval_s=0.2, **kw)


def topics(c: FakeCluster) -> None:
    for topic in ("in", "fired", "looks", "dead"):
        c.create_topic(topic, 1)


# A timer fires while no record comes, once, in a transaction of its own that deletes
# it; a cancelled one never fires; the next instance, restoring from the changelog
# alone, finds the fired one gone and the far one pending. Caught: no transaction when
# idle (the engine returning on an empty poll: nothing fired); the partition's offset
# not committed again with the fire (no position record: its deletion never reached the
# changelog, and the second instance saw the fired timer pending).
async def test_a_timer_fires_once_while_idle_and_its_deletion_is_restored(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    topics(c)
    await produce(
        c.bootstrap_servers, [(b"a", b"set"), (b"b", b"set"), (b"b", b"cancel"), (b"far", b"far")]
    )
    async with eosflow.EosApp(Reminder(), cfg(c, "tx-1", tmp_path / "a")) as app:
        await until_committed(c.bootstrap_servers, "in", 1, "g", 4, (app,))
        assert await until_read(c.bootstrap_servers, "fired", 1, app) == [b"a"]
    fired = await read_topic(c.bootstrap_servers, "fired")
    assert [(k, v) for _p, _o, k, v in fired] == [(b"a", b"payload-a")]
    # the fire's commit named what it wrote last in its offset's metadata: the deletion
    timers_log = await read_topic(c.bootstrap_servers, changelog("g", "in", "timers"))
    assert await written_metadata(c.bootstrap_servers) == {"timers": timers_log[-1][1]}
    await produce(c.bootstrap_servers, [(b"x", b"look")])
    async with eosflow.EosApp(Reminder(), cfg(c, "tx-2", tmp_path / "b")) as app:
        await until_read(c.bootstrap_servers, "looks", 1, app)
    looks = await read_topic(c.bootstrap_servers, "looks")
    assert [v for _p, _o, _k, v in looks] == [b"far"]
    assert len(await read_topic(c.bootstrap_servers, "fired")) == 1


# A timer that fell due while no instance ran fires once its partition's stores are
# restored by the next one. Caught: the timers not asked at the end of a transaction
# with records nor when idle (only the record path's event-time timers: never fired).
async def test_a_timer_due_during_an_outage_fires_after_the_restore(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    topics(c)
    await produce(c.bootstrap_servers, [(b"far", b"far")])
    async with eosflow.EosApp(Reminder(), cfg(c, "tx-1", tmp_path / "a")) as app:
        await until_committed(c.bootstrap_servers, "in", 1, "g", 1, (app,))
        await produce(c.bootstrap_servers, [(b"a", b"slow")])
        await until_committed(c.bootstrap_servers, "in", 1, "g", 2, (app,))
    # (stopped within the 2 s: the timer pending)
    assert await read_topic(c.bootstrap_servers, "fired") == []
    async with eosflow.EosApp(Reminder(), cfg(c, "tx-2", tmp_path / "b")) as app:
        assert await until_read(c.bootstrap_servers, "fired", 1, app) == [b"a"]


# A fire that raises, with a dead-letter topic: the timer is dead-lettered (its key and
# payload) and dropped, the others fire. Caught: the failing fire's timer deletion taken
# back with its writes (it failed again every transaction: dead-lettered many times).
async def test_a_failing_fire_is_dead_lettered_once(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    topics(c)
    await produce(c.bootstrap_servers, [(b"boom", b"set"), (b"a", b"set")])
    config = cfg(c, "tx-1", tmp_path / "a", dead_letter_topic="dead")
    async with eosflow.EosApp(Reminder(), config) as app:
        assert await until_read(c.bootstrap_servers, "fired", 1, app) == [b"a"]
        assert await until_read(c.bootstrap_servers, "dead", 1, app) == [b"boom"]
        await produce(c.bootstrap_servers, [(b"x", b"look")])  # a transaction more
        await until_committed(c.bootstrap_servers, "in", 1, "g", 3, (app,))
    dead = await read_topic(c.bootstrap_servers, "dead")
    assert [(k, v) for _p, _o, k, v in dead] == [(b"boom", b"payload-boom")]


# A wall-clock timer's fire has no record, so no event time: a window refuses it (one
# line, the app stops), rather than taking the last record's time or none. Caught: the
# fire handed the partition's window handles (the update went to a stale window).
async def test_a_wall_clock_fire_may_not_use_a_window(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    topics(c)

    class Windowed(Reminder):
        windows = {"w": eosflow.Tumbling(size_s=10)}

        async def fire(self, timer: eosflow.Timer) -> eosflow.Output:
            self.window("w").update(timer.key, lambda n: n + 1, 0)
            return await super().fire(timer)

    await produce(c.bootstrap_servers, [(b"a", b"set")])
    app = eosflow.EosApp(Windowed(), cfg(c, "tx-1", tmp_path))
    with pytest.raises(eosflow.ProcessingError, match=r"wall-clock timer of key b'a'.*in process"):
        async with app:
            await until_read(c.bootstrap_servers, "fired", 1, app)
    assert await read_topic(c.bootstrap_servers, "fired") == []


# More timers due than a transaction may fire: the rest fire in the next transactions.
# Caught: the scans' low bound moved past the timers left due (only the first fired).
async def test_a_backlog_of_due_timers_fires_over_several_transactions(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    topics(c)
    await produce(c.bootstrap_servers, [(k, b"set") for k in (b"a", b"b", b"c")])
    config = cfg(c, "tx-1", tmp_path, max_records_per_txn=1)
    async with eosflow.EosApp(Reminder(), config) as app:
        fired = await until_read(c.bootstrap_servers, "fired", 3, app)
    assert sorted(fired) == [b"a", b"b", b"c"]
