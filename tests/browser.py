"""A real browser for the console's tests: Debian's headless Chromium, driven by its own
command-line switches (``--dump-dom``, ``--screenshot``), no driver library.

``scripts/test`` installs Chromium from Debian's packages where it is missing (as root,
with apt-get), as it installs Kafka's jars. A test that needs it is skipped, with the
reason, where it cannot be had -- but in CI (``CI=true``), where that fails the test.

``--virtual-time-budget`` lets the page's timers run that many milliseconds of virtual
time before the DOM is read; the browser's clock waits while a request is in flight, so
the page's once-a-second refresh has had its answers by then. The switches that keep
Chromium off the network (background networking, component updates, sync) matter on a
closed machine: without them it retries Google's hosts at every start.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

_SWITCHES = (
    "--headless",
    "--no-sandbox",  # as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


@dataclass(frozen=True)
class Chromium:
    path: str

    @classmethod
    def find(cls) -> Chromium:
        """The machine's Chromium, or the test skipped (failed in CI) saying why."""
        path = shutil.which("chromium") or shutil.which("chromium-browser")
        if path is None:
            why = "no chromium on PATH (scripts/test installs Debian's package as root)"
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI: {why}")
            pytest.skip(why)
        return cls(path)

    async def run(self, *args: str, timeout_s: float = 60.0) -> str:
        with tempfile.TemporaryDirectory(prefix="eosflow-chromium-") as profile:
            proc = await asyncio.create_subprocess_exec(
                self.path,
                *_SWITCHES,
                f"--user-data-dir={profile}",
                *args,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise
        assert proc.returncode == 0, f"chromium exited {proc.returncode}: {err.decode()[-2000:]}"
        return out.decode()

    async def dom(self, url: str, budget_ms: int = 3000) -> str:
        """The page's DOM once its scripts ran ``budget_ms`` of virtual time."""
        return await self.run(f"--virtual-time-budget={budget_ms}", "--dump-dom", url)

    async def screenshot(
        self, url: str, path: Path, budget_ms: int = 3000, height: int = 1000
    ) -> None:
        """A picture of the page 1280 pixels wide, as a laptop screen shows it (and
        ``height`` tall: more shows what lies below the first screen)."""
        await self.run(
            f"--virtual-time-budget={budget_ms}",
            f"--screenshot={path}",
            f"--window-size=1280,{height}",
            url,
        )
        assert await asyncio.to_thread(lambda: path.stat().st_size) > 0


def element(dom: str, id_: str) -> str:
    """The opening tag through the closing tag of the element with ``id_`` (no nesting
    of the same tag inside: what the console's elements are)."""
    m = re.search(rf'<(\w+)\b[^>]*\bid="{re.escape(id_)}"[^>]*>', dom)
    assert m is not None, f"no element #{id_} in the page"
    end = dom.find(f"</{m.group(1)}>", m.end())
    return dom[m.start() : end if end >= 0 else m.end()]


def attribute(dom: str, id_: str, name: str) -> str:
    tag = element(dom, id_).split(">", 1)[0]
    m = re.search(rf'\b{re.escape(name)}="([^"]*)"', tag)
    assert m is not None, f"#{id_} has no {name}: {tag}"
    return m.group(1)


def text(html: str) -> str:
    """What a person reads of ``html``: its tags dropped, entities for <, > and & read."""
    words = re.sub(r"<[^>]+>", " ", html)
    words = words.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return re.sub(r"\s+", " ", words).strip()


def rows(dom: str, id_: str) -> list[list[str]]:
    """The text of each cell of each body row of the table ``id_``."""
    body = element(dom, id_).split("<tbody>", 1)[-1]
    return [
        [text(cell) for cell in re.findall(r"<td\b[^>]*>(.*?)</td>", row, flags=re.S)]
        for row in re.findall(r"<tr\b[^>]*>(.*?)</tr>", body, flags=re.S)
    ]
