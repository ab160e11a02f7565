"""A restore that finds a store behind the group's committed offset, with nothing pending
on its changelog, still ends: at once for a store with no position record at all (one
added to a running app), after reading on for ``transaction_timeout_s`` for one with a
position (input processed for a while without it) -- logged either way, then the app
counts on. ``test_state_mechanisms.py::test_a_store_behind_a_stale_changelog_end_reads_on``
has the other side: a stale end that moves on within the wait."""

from __future__ import annotations

from pathlib import Path

from kit import log_seen
from stateful import seed_keys, state_config, until_committed

import eosflow
from eosflow.testing import FakeCluster
from examples.counting import Count

GOING_ON = "store 'counts' of in[0] reflects input offset"  # ... going on with it
READING_ON = "store 'counts' of in[0] reflects input up to offset"  # ... reading on


class Uncounted(Count):
    """``Count`` without its store: what an app ran before the store was added, or
    while it was taken out."""

    stores: dict[str, eosflow.Serde] = {}

    async def process(self, record: eosflow.Record) -> eosflow.Output:
        return eosflow.Output(self.output or f"{record.topic}-counts", b"-", key=record.key)


async def _run(
    c: FakeCluster, processor: eosflow.Processor, dir_: Path, txn: str, until: int
) -> None:
    config = state_config(c.bootstrap_servers, "g", "in", txn, dir_)
    app = eosflow.EosApp(processor, config)
    async with app:
        await seed_keys(c.bootstrap_servers, "in", 50, 10, start=until - 50)
        await until_committed(c.bootstrap_servers, "in", 1, "g", until, (app,))


# Caught: a behind store with a position never settled (the last app waited for ever:
# "50 more" not committed); the wait skipped for it (no "reading the changelog on");
# a store with no position waiting too (the second app logged "reading the changelog on").
async def test_a_store_behind_the_committed_offset_settles_at_once_or_after_the_wait(
    eosflow_cluster: FakeCluster, tmp_path: Path
) -> None:
    c = eosflow_cluster
    c.create_topic("in", 1)
    c.create_topic("in-counts", 1)
    await _run(c, Uncounted(), tmp_path / "a", "tx-1", 50)  # no store: offsets only
    with (
        log_seen("eosflow.state", READING_ON) as waited,
        log_seen("eosflow.state", GOING_ON) as went_on,
    ):
        await _run(c, Count(), tmp_path / "b", "tx-2", 100)  # the store added
    assert went_on.is_set() and not waited.is_set()
    await _run(c, Uncounted(), tmp_path / "c", "tx-3", 150)  # the store left behind at 100
    with (
        log_seen("eosflow.state", READING_ON) as waited,
        log_seen("eosflow.state", GOING_ON) as went_on,
    ):
        await _run(c, Count(), tmp_path / "d", "tx-4", 200)
    assert waited.is_set() and went_on.is_set()
