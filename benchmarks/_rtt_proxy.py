"""A TCP proxy that adds round-trip time: a stand-in for a broker on another host.

This machine's kernel has no ``netem`` queueing discipline (``tc qdisc add ... netem``
answers "Specified qdisc kind is unknown"), so the delay is added in user space: every
chunk read from one side is written to the other ``rtt_ms / 2`` later, in order, in both
directions; a request and its answer so take ``rtt_ms`` more. The broker advertises the
proxy's port (``advertised.listeners``), so every client connection goes through it.

``upstream`` is called at each new connection, so the proxy can listen before the broker
has its port. It runs in the benchmark's own process (its event loop is idle while a
contender runs); its CPU is spent on the machine's cores like the broker's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

CHUNK = 256 * 1024


class RttProxy:
    def __init__(self, upstream: Callable[[], tuple[str, int]], rtt_ms: float) -> None:
        self._upstream = upstream
        self._one_way_s = rtt_ms / 2000.0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        host, port = self._upstream()
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, up_writer):
                w.close()
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy ``reader`` to ``writer``, each chunk delivered one-way delay after it came."""
        loop = asyncio.get_running_loop()
        pending: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await pending.get()
                if not chunk:
                    writer.write_eof() if writer.can_write_eof() else writer.close()
                    return
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()

        delivering = asyncio.ensure_future(deliver())
        try:
            while True:
                chunk = await reader.read(CHUNK)
                pending.put_nowait((loop.time() + self._one_way_s, chunk))
                if not chunk:
                    break
            await delivering
        finally:
            delivering.cancel()
