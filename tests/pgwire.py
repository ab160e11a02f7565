"""TCP proxies in front of the test PostgreSQL that break its wire protocol on cue, for
the sink's fault tests: what a network or a dying server does to a connection, made to
happen at one chosen point. Each proxy serves one upstream server on 127.0.0.1 and a
free port; ``dsn(pg)`` is ``pg.dsn`` pointed at the proxy."""

from __future__ import annotations

import asyncio
import struct
from typing import Self

from eosflow._servers import Postgres

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


class _Framed(_Proxy):
    """A proxy that reads the server's side message by message and lets ``_passed``
    change each one (the client's side is relayed as it comes, ``_sent`` seeing it)."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__(upstream_port)
        self.armed = asyncio.Event()
        self.injected = asyncio.Event()

    def _sent(self, data: bytes) -> None:
        """The client's ``data``, before it goes to the server."""

    def _passed(self, kind: bytes, message: bytes) -> bytes:
        """What the client gets for the server's ``message`` of type ``kind``."""
        return message

    async def _client(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def up() -> None:  # the client's bytes, relayed as they come
            while data := await cr.read(65536):
                self._sent(data)
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
                cw.write(self._passed(kind, await message(kind)))
                await cw.drain()
                kind = await sr.readexactly(1)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            uploading.cancel()
            cw.close()
            sw.close()


class FatalOutOfTurn(_Framed):
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
        self._seen = 0

    def _passed(self, kind: bytes, message: bytes) -> bytes:
        if kind != b"Z" or not message.endswith(b"T") or not self.armed.is_set():
            return message
        if self.injected.is_set():
            return message
        self._seen += 1
        if self._seen != self.after:
            return message
        self.injected.set()
        return message + TERMINATING


class CommitOutcomeUnknown(_Framed):
    """Once armed, lets one COMMIT through and answers it, in the server's place, with
    ``statement_completion_unknown`` (SQLSTATE 40003) and a ReadyForQuery: the server
    committed, the client is told it cannot know -- as a server or a pooler in front of
    it says when a connection failed during COMMIT."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__(upstream_port)
        self._pending = False

    def _sent(self, data: bytes) -> None:
        if COMMIT in data and self.armed.is_set() and not self.injected.is_set():
            self._pending = True

    def _passed(self, kind: bytes, message: bytes) -> bytes:
        if not self._pending:
            return message
        if kind == b"C":  # CommandComplete "COMMIT": withheld
            return b""
        if kind != b"Z":
            return message
        self._pending = False
        self.injected.set()
        unknown = _error_response("ERROR", "40003", "statement completion unknown")
        return unknown + b"Z" + struct.pack("!i", 5) + b"I"
