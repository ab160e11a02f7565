"""``eosflow console``: a group's page, in a real browser (``tests/browser.py``), on any
broker of the ladder -- what ``eosflow status`` reads, refreshed live: the members, who
holds which partition, committed offsets against the last stable offsets, the lag; a
look that fails shown as such; SIGTERM ends it with 0."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from pathlib import Path

from browser import Chromium, attribute, element, rows, text
from kit import create_topic
from stateful import seed_keys, state_config, until_committed
from test_console import shots

import eosflow
from eosflow._console import REFRESH_S, GroupPage
from eosflow.testing._ladder import Broker
from examples.counting import Count


async def _console(bootstrap: str, group: str) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "eosflow",
        "console",
        "--bootstrap-servers",
        bootstrap,
        "--group-id",
        group,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    assert line.startswith(f"eosflow console: group {group} on http://127.0.0.1:"), line
    return proc, line.rsplit(" ", 1)[1].strip()


async def _stopped(proc: asyncio.subprocess.Process) -> int:
    proc.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(proc.wait(), 15)


async def test_the_group_page_shows_the_brokers_view_live(
    eosflow_broker: Broker, tmp_path: Path
) -> None:
    browser = Chromium.find()
    b = eosflow_broker
    bs = b.bootstrap_servers
    src, group = b.unique("gconsole-in"), b.unique("gconsole-g")
    await create_topic(bs, src, 2)
    await create_topic(bs, f"{src}-counts", 2)
    await seed_keys(bs, src, 60, 6)
    config = state_config(bs, group, src, b.unique("gconsole-tx"), tmp_path)
    console, url = await _console(bs, group)
    try:
        async with eosflow.EosApp(Count(), config) as app:
            await until_committed(bs, src, 2, group, 60, (app,))
            first = await browser.dom(url)
        table = rows(first, "partitions")
        assert [(r[0], r[1]) for r in table] == [(src, "0"), (src, "1")], table
        assert sum(int(r[2]) for r in table) == 60, table  # committed, all of the input
        assert all(r[4] == "0" and "@" in r[5] for r in table), table  # caught up, held
        assert text(element(first, "fig-members")) == "1"
        assert text(element(first, "fig-partitions")) == "2 / 2"

        # the app gone and 30 more records in: the page shows them as lag
        await seed_keys(bs, src, 30, 6, start=60)
        await asyncio.sleep(REFRESH_S)  # the page's last look is older than that now
        second = await browser.dom(url)
        assert text(element(second, "fig-lag")) == "30", text(element(second, "fig-lag"))
        assert text(element(second, "fig-partitions")) == "0 / 2"
        assert sum(int(r[4]) for r in rows(second, "partitions")) == 30
        assert float(attribute(second, "chart-lag", "data-max")) == 30
        await browser.screenshot(url, shots() / "console-group.png")
    finally:
        code = await _stopped(console)
    assert code == 0


async def test_a_look_that_fails_is_shown_and_tried_again(eosflow_broker: Broker) -> None:
    browser = Chromium.find()
    group = eosflow_broker.unique("gconsole-none")
    console, url = await _console(eosflow_broker.bootstrap_servers, group)
    try:
        dom = await browser.dom(url)
        error = text(element(dom, "error"))
        assert f"group {group!r} has no committed offsets" in error, error
    finally:
        assert await _stopped(console) == 0


# However many pages ask, the broker is looked at once per REFRESH_S. Look at every ask
# and five pages asking together make five looks.
def test_the_broker_is_looked_at_at_most_once_per_refresh() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    looks = 0

    async def look() -> dict[str, object]:
        nonlocal looks
        looks += 1
        return {"group": "g", "lag": looks, "partitions": []}

    now = [1000.0]
    page = GroupPage("g", look, loop, clock=lambda: now[0])
    answer = page.routes()["/console/group.json"]
    try:
        for _ in range(5):
            assert answer()[0] == 200
        assert looks == 1
        now[0] += REFRESH_S
        answer()
        assert looks == 2
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
