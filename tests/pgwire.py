"""TCP proxies in front of the test PostgreSQL that break its wire protocol on cue, for
the sink's fault tests: what a network or a dying server does to a connection, made to
happen at one chosen point. Each proxy serves one upstream server on 127.0.0.1 and a
free port; ``dsn(pg)`` is ``pg.dsn`` pointed at the proxy."""

from __future__ import annotations

import asyncio
import struct
from typing import Self

from eosflow.testing._postgres import Postgres

COMMIT = b"Q\x00\x00\x00\x0cCOMMIT;\x00"  # asyncpg's COMMIT: a simple Query message


def _error_response(severity: str, code: str, message: str) -> bytes:
    """A backend ErrorResponse message (type ``E``)."""
    fields = b"".join(
        kind + text.encode() + b"\x00"
        for kind, text in ((b"S", severity), (b"V", severity), (b"C", code), (b"M", message))
    )
    body = fields + b"\x00"
    return b"E" + struct.pack("!i", 4 + len(body)) + body


# what a backend sends when pg_terminate_backend or a fast shutdown reaches it
TERMINATING = _error_response(
    "FATAL", "57P01", "terminating connection due to administrator command"
)


class _Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    def dsn(self, pg: Postgres) -> str:
        return pg.dsn.replace(f":{pg.port}/", f":{self.port}/")

    async def __aenter__(self) -> Self:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _client(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class CommitReplyLost(_Proxy):
    """Once armed, lets one COMMIT through, waits for the server's answer and then cuts
    the client off without it: the batch is committed and the sink does not know."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__(upstream_port)
        self.armed = asyncio.Event()
        self.cut = asyncio.Event()

    async def _client(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        replies: asyncio.Queue[bytes] = asyncio.Queue()

        async def down() -> None:  # the server's bytes, relayed unless held back
            while data := await sr.read(65536):
                await replies.put(data)
            await replies.put(b"")

        async def relay() -> None:
            while data := await replies.get():
                cw.write(data)
                await cw.drain()
            cw.close()

        reader, relayer = asyncio.create_task(down()), asyncio.create_task(relay())
        try:
            while data := await cr.read(65536):
                if COMMIT in data and self.armed.is_set() and not self.cut.is_set():
                    self.cut.set()
                    relayer.cancel()  # nothing more reaches the client
                    sw.write(data)
                    await sw.drain()
                    await replies.get()  # the server answered: committed
                    break
                sw.write(data)
                await sw.drain()
        finally:
            reader.cancel()
            relayer.cancel()
            cw.close()
            sw.close()


class FatalOutOfTurn(_Proxy):
    """Once armed, puts a FATAL ErrorResponse right behind the ``after``-th ReadyForQuery
    that the server sends inside a transaction (status ``T``), in the same write, and
    keeps the connection open. asyncpg reads the ReadyForQuery and ends the statement,
    then meets an error with no statement running: its protocol state is lost, the next
    statement raises ``InternalClientError`` ("cannot switch to state ..; another
    operation (2) is in progress") and asyncpg closes the connection. So a backend's
    FATAL reaches a client between two statements while its socket is still closing --
    CI's chaos met it with PostgreSQL SIGKILLed under a write transaction."""

    def __init__(self, upstream_port: int, after: int = 1) -> None:
        super().__init__(upstream_port)
        self.after = after
        self.armed = asyncio.Event()
        self.injected = asyncio.Event()
        self._seen = 0

    async def _client(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def up() -> None:  # the client's bytes, relayed as they come
            while data := await cr.read(65536):
                sw.write(data)
                await sw.drain()
            sw.close()

        async def message(kind: bytes) -> bytes:
            head = await sr.readexactly(4)
            return kind + head + await sr.readexactly(struct.unpack("!i", head)[0] - 4)

        uploading = asyncio.create_task(up())
        try:
            kind = await sr.readexactly(1)
            if kind == b"N":  # SSL refused (asyncpg asks first): one byte, not a message
                cw.write(kind)
                kind = await sr.readexactly(1)
            while True:
                out = await message(kind)
                if kind == b"Z" and out.endswith(b"T") and self._due():
                    out += TERMINATING
                    self.injected.set()
                cw.write(out)
                await cw.drain()
                kind = await sr.readexactly(1)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            uploading.cancel()
            cw.close()
            sw.close()

    def _due(self) -> bool:
        if not self.armed.is_set() or self.injected.is_set():
            return False
        self._seen += 1
        return self._seen == self.after
