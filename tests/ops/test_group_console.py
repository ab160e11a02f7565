"""``eosflow console``: a group's page, in a real browser (``tests/browser.py``), on any
broker of the ladder -- what ``eosflow status`` reads, refreshed live: the members, who
holds which partition, committed offsets against the last stable offsets, the lag; a
look that fails shown as such; no setting on the page; SIGTERM ends it with 0."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

from browser import Chromium, attribute, element, rows, text
from stateful import seed_keys, until_committed
from test_console import counting, shots

import eosflow
from eosflow._console import REFRESH_S, GroupPage
from eosflow.testing._ladder import Broker
from examples.counting import Count

PASSWORD = "group-console-must-not-show-this"


@contextlib.asynccontextmanager
async def console(bootstrap: str, group: str, out: list[str]) -> AsyncIterator[str]:
    """``eosflow console`` for ``group`` (holding a SASL password it does not use), its
    URL; SIGTERM on the way out must end it with 0 (killed if it does not). What it
    printed and logged goes to ``out``."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "eosflow", "console", "--bootstrap-servers", bootstrap),
        *("--group-id", group),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "EOSFLOW_SASL_PASSWORD": PASSWORD},
    )
    assert proc.stdout is not None and proc.stderr is not None
    code: int | None = None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        out.append(line)
        assert line.startswith(f"eosflow console: group {group} on http://127.0.0.1:"), line
        yield line.rsplit(" ", 1)[1].strip()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        out.append((await proc.stdout.read()).decode())
        out.append((await proc.stderr.read()).decode())
    assert code == 0, out


async def test_the_group_page_shows_the_brokers_view_live(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    browser = Chromium.find()
    b = eosflow_broker
    bs = b.bootstrap_servers
    src, group, config = await counting(b, "gconsole", tmp_path)
    out: list[str] = []
    async with console(bs, group, out) as url:
        async with eosflow.EosApp(Count(), config) as app:
            await until_committed(bs, src, 2, group, 60, (app,))
            first = await browser.dom(url)
            await browser.screenshot(url, shots() / "console-group-live.png", height=1100)
        table = rows(first, "partitions")
        assert [(r[0], r[1]) for r in table] == [(src, "0"), (src, "1")], table
        assert sum(int(r[2]) for r in table) == 60, table  # committed, all of the input
        assert all(r[4] == "0" and "@" in r[5] for r in table), table  # caught up, held
        assert text(element(first, "fig-members")) == "1"
        assert text(element(first, "fig-partitions")) == "2 / 2"
        # the member's transactional id as its coordinator holds it, where it tells
        txns = rows(first, "transactions")
        if describes_transactions(b):
            assert len(txns) == 1 and txns[0][1] == config.transactional_id, txns
            assert txns[0][0].startswith(f"eosflow-{config.transactional_id}-"), txns
            assert txns[0][2] in ("Ongoing", "PrepareCommit", "CompleteCommit", "Empty"), txns
            assert "/" in txns[0][3] and int(txns[0][3].split("/")[0]) >= 0, txns
        else:
            assert txns == [["not told"]], txns
            assert "Kafka 3.0+" in text(element(first, "txn-note"))

        # the app gone and 30 more records in: the page shows them as lag
        await seed_keys(bs, src, 30, 6, start=60)
        await asyncio.sleep(REFRESH_S)  # the page's last look is older than that now
        second = await browser.dom(url)
        assert text(element(second, "fig-lag")) == "30", text(element(second, "fig-lag"))
        assert text(element(second, "fig-partitions")) == "0 / 2"
        assert sum(int(r[4]) for r in rows(second, "partitions")) == 30
        assert float(attribute(second, "chart-lag", "data-max")) == 30
        assert int(attribute(second, "chart-lag", "data-drawn")) >= 2  # the earlier looks too
        assert PASSWORD not in first + second
        await browser.screenshot(url, shots() / "console-group.png")
    assert PASSWORD not in "".join(out)


# The transactions cannot be read (here every DescribeTransactions is dropped by the
# test cluster, its connection closed): the group's view stands, the table says why.
# Caught: a failure of that look failing the whole look (no partitions shown).
async def test_transactions_not_read_leave_the_groups_view_standing(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    cluster = eosflow_broker.require_fake("DescribeTransactions dropped")
    browser = Chromium.find()
    bs = eosflow_broker.bootstrap_servers
    src, group, config = await counting(eosflow_broker, "gconsole-nodt", tmp_path)
    dropped = cluster.intercept("DescribeTransactions", drop=True, times=None)
    out: list[str] = []
    try:
        async with console(bs, group, out) as url:
            async with eosflow.EosApp(Count(), config) as app:
                await until_committed(bs, src, 2, group, 60, (app,))
                dom = await browser.dom(url)
    finally:
        cluster.remove_fault(dropped)
    assert [r[:2] for r in rows(dom, "partitions")] == [[src, "0"], [src, "1"]]
    assert rows(dom, "transactions") == [["not told"]]
    note = text(element(dom, "txn-note"))
    assert note.startswith("the transactions were not read: describing transactions"), note
    assert dropped.hits >= 1


def describes_transactions(b: Broker) -> bool:
    """Whether the cluster serves DescribeTransactions (Kafka 3.0+)."""
    if b.kafka is not None:
        return int(b.kafka.version.split(".")[0]) >= 3
    return b.cluster is None or b.cluster.settings.profile == "4.0"


async def test_a_look_that_fails_is_shown_and_tried_again(eosflow_broker: Broker) -> None:
    browser = Chromium.find()
    group = eosflow_broker.unique("gconsole-none")
    out: list[str] = []
    async with console(eosflow_broker.bootstrap_servers, group, out) as url:
        dom = await browser.dom(url)
    error = text(element(dom, "error"))
    assert f"group {group!r} has no committed offsets" in error, error
    assert PASSWORD not in dom + "".join(out)


# However many pages ask, the broker is looked at once while the last look is young, and
# one look is in flight at a time: five pages asking together while a look takes longer
# than REFRESH_S make one look, not five queued one behind another. Mutations caught: a
# look at every ask (5 looks); the looks one at a time behind a lock, a look's age taken
# from its start (5 looks, one after another).
def test_the_broker_is_looked_at_at_most_once_per_refresh() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    looks = 0

    async def look() -> dict[str, object]:
        nonlocal looks
        looks += 1
        now[0] += 2 * REFRESH_S  # a slow broker: the look outlasts REFRESH_S
        await asyncio.sleep(0.3)
        return {"group": "g", "lag": looks, "partitions": []}

    now = [1000.0]
    page = GroupPage("g", look, loop, monotonic=lambda: now[0])
    answer = page.routes()["/console/group.json"]
    try:
        asking = [threading.Thread(target=answer) for _ in range(5)]
        began = time.monotonic()
        for t in asking:
            t.start()
        for t in asking:
            t.join(10)
        assert looks == 1
        assert time.monotonic() - began < 2.0  # nobody waited behind another's look
        for _ in range(3):
            assert answer()[0] == 200
        assert looks == 1
        now[0] += REFRESH_S
        answer()
        assert looks == 2
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
