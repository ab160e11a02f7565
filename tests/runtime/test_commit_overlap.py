"""The offsets go into the transaction while the flush waits for its answers
(``_engine._end``): a commit takes the longer of the two, not their sum.

Both tests let a first transaction commit (the producer then knows its transaction
coordinator: finding it goes on the connection Produce uses, which a broker answers in
order), park the processor in the second, and hold that transaction's Produce at the
test cluster while they watch for TxnOffsetCommit.
"""

from __future__ import annotations

import asyncio

from kit import Gate, session_of
from test_mechanisms import all_done, assert_exactly_once, cfg, seed, until

import eosflow
from eosflow._protocol import _codes as codes
from eosflow.testing import FakeCluster, FaultRule


async def _second_transaction_held(
    c: FakeCluster, **produce: object
) -> tuple[eosflow.EosApp, FaultRule, FaultRule, FaultRule]:
    """An app in its second transaction (records 100-199), whose Produce is held (with
    ``produce``'s further rule settings); the rules watching TxnOffsetCommit and EndTxn
    beside it. The first transaction's offsets (100) are committed, and readable, by
    then. Each transaction ends at its 100 records: the commit interval and the minimum
    transaction (4 s) keep a short poll from ending one early."""
    await seed(c)
    proc = Gate("out", park_at=150)
    config = cfg(c, max_records_per_txn=100, commit_interval_s=4.0, min_transaction_s=4.0)
    app = eosflow.EosApp(proc, config)
    await app.__aenter__()
    try:
        await asyncio.wait_for(proc.parked.wait(), 20)
        # the test cluster applies committed offsets a moment after EndTxn (``offset_lag_s``)
        first = {("in", 0): 100}
        await until(app, lambda: c.committed("g", "in") == first, "the first txn's offsets")
        held = c.intercept("Produce", hold=True, **produce)
        offsets = c.intercept("TxnOffsetCommit")  # observes the next, changes nothing
        end_txn = c.intercept("EndTxn")
        proc.gate.set()
        await held.matched()
    except BaseException:  # the app stops here, not under the cluster fixture's teardown
        await app.__aexit__(None, None, None)
        raise
    return app, held, offsets, end_txn


# Send the offsets after the flush (the order before) and TxnOffsetCommit never reaches
# the broker while the Produce is held: `matched` times out.
async def test_the_offsets_go_while_the_produce_is_unanswered(cluster: FakeCluster) -> None:
    c = cluster
    app, held, offsets, end_txn = await _second_transaction_held(c)
    try:
        await offsets.matched(timeout_s=10.0)  # while the Produce is held
        assert end_txn.hits == 0  # EndTxn still waits for the flush
        held.release()
        await until(app, lambda: all_done(app, c), "all committed")
    finally:
        await app.__aexit__(None, None, None)
    assert app.stats.aborted == app.stats.recovered == 0, app.stats
    await assert_exactly_once(c)


# Offsets accepted into a transaction whose outputs then fail are aborted with it: the
# producer is re-initialised (KIP-360), the records are processed again, and each output
# is there once. Take the failed flush for a success once the offsets went, and the
# offsets commit without the outputs: the held records are lost.
async def test_offsets_sent_before_a_failed_produce_are_aborted(cluster: FakeCluster) -> None:
    c = cluster
    app, held, offsets, _ = await _second_transaction_held(c, error=codes.UNKNOWN_SERVER_ERROR)
    try:
        await offsets.matched(timeout_s=10.0)
        committed = dict(c.committed("g", "in"))
        held.release()  # answered with the error now
        await until(app, lambda: all_done(app, c), "all committed")
    finally:
        await app.__aexit__(None, None, None)
    assert committed == {("in", 0): 100}, committed  # the second's sent, not committed
    await assert_exactly_once(c)
    assert app.stats.recovered >= 1, app.stats
    assert "produce failed" in (session_of(app).last_failure_reason or "")  # type: ignore[union-attr]
