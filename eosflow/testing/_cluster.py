"""``FakeCluster``: a one-broker Kafka cluster in-process, speaking the wire protocol.

It is a test double and the demo's embedded default, never a production path. Every
behaviour it has must also be a behaviour of genuine Kafka: the broker-contract tests in
``tests/contract`` run unchanged against both.

What the broker knows and answers is ``Broker``'s (``_broker``); this is its listener,
its connections, its faults and its controls. Requests on one connection are handled one
at a time, in order, as Kafka does (a connection is muted while its request is in
progress); clients that need concurrency open more connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
import time
from typing import Any

from . import _codec
from ._broker import Broker, ClusterSettings
from ._faults import FaultRule, error_body
from ._handlers import HANDLERS
from ._sasl import SaslConnection

log = logging.getLogger("eosflow.testing")

_MAX_FRAME = 100 * 1024 * 1024

__all__ = ["FakeCluster"]


class FakeCluster(Broker):
    """An in-process Kafka broker on 127.0.0.1.

    ``async with FakeCluster() as cluster:`` then connect any Kafka client to
    ``cluster.bootstrap_servers``. Topics, logs, groups, offsets and transactions live in
    memory and survive ``stop()``/``start()`` (and ``crash()``), not the process.
    """

    node_id = 0

    def __init__(
        self, settings: ClusterSettings | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        super().__init__(settings or ClusterSettings(), HANDLERS, host=host, port=port)
        self.faults: list[FaultRule] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._conn_tasks: set[asyncio.Task[Any]] = set()
        self._busy: set[asyncio.Task[Any]] = set()  # connections answering a request
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle ------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        if self._server is not None:
            return
        tls = self.settings.security.server_context() if self.settings.security else None
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=tls)
        self.port = self._server.sockets[0].getsockname()[1]
        self._tasks = [
            asyncio.create_task(self._session_sweeper()),
            asyncio.create_task(self._txn_sweeper()),
            asyncio.create_task(self._retention_sweeper()),
        ]
        log.info(
            "test cluster listening on %s (profile %s)",
            self.bootstrap_servers,
            self.settings.profile,
        )

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop listening, let requests in flight finish and answer (up to ``grace_s``),
        then close every connection. State is kept for ``start()``."""
        await self._shutdown(grace_s)

    async def crash(self) -> None:
        """Stop at once: requests in flight are lost without an answer, as when a broker
        process dies. State is kept for ``start()``."""
        await self._shutdown(0.0)

    async def _shutdown(self, grace_s: float) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        deadline = time.monotonic() + grace_s
        while self._busy and time.monotonic() < deadline:  # noqa: ASYNC110 (bounded drain)
            await asyncio.sleep(0.01)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
        if self._server is not None:
            for w in list(self._writers):
                w.close()
            conns = list(self._conn_tasks)
            for task in conns:
                task.cancel()
            await asyncio.gather(*conns, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None
        self._writers.clear()
        self._closing = False

    async def __aenter__(self) -> FakeCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- controls ---------------------------------------------------------------------

    def intercept(self, api: str | int, **kwargs: Any) -> FaultRule:
        """Add a fault rule for an API (name like ``"EndTxn"`` or key); see ``_faults``."""
        key = api if isinstance(api, int) else _codec.API_KEYS[api]
        rule = FaultRule(key, **kwargs)
        self.faults.append(rule)
        return rule

    def remove_fault(self, rule: FaultRule) -> None:
        """Take a rule out before it is exhausted (e.g. ``times=None`` for a while)."""
        with contextlib.suppress(ValueError):
            self.faults.remove(rule)

    def committed(self, group_id: str, topic: str | None = None) -> dict[tuple[str, int], int]:
        """The group's committed offsets (optionally of one topic), as a reader of
        ``__consumer_offsets`` would see them now."""
        g = self.groups.get(group_id)
        if g is None:
            return {}
        return {tp: off for tp, (off, _) in g.offsets.items() if topic in (None, tp[0])}

    def delay_markers(self, topic: str, seconds: float) -> None:
        """Transaction markers of ``topic``'s partitions land ``seconds`` later than the
        rest (0 undoes it): a committed transaction's offsets can then be read back,
        stable, before that topic shows its records committed -- as on a cluster of
        several brokers whose leader of that topic is slow or moving."""
        if seconds > 0:
            self.txns.marker_lag[topic] = seconds
        else:
            self.txns.marker_lag.pop(topic, None)

    def move_txn_coordinators(self) -> None:
        """Every transaction coordinator moves to another broker, as when its broker is
        stopped, killed or restarted: the new one loads the transaction log, which holds
        no last epoch (Kafka's ``TransactionLogValue``). A producer whose transaction the
        coordinator timed out is then refused its KIP-360 re-initialisation."""
        self.txns.forget_last_epochs()

    def delay_offsets(self, seconds: float) -> None:
        """A committed transaction's offsets reach a non-stable OffsetFetch ``seconds``
        after its EndTxn, while its data partitions' markers land as usual -- as behind
        a stalled group coordinator (a stable fetch still answers UNSTABLE_OFFSET_COMMIT
        meanwhile). 0 restores the settings' lag."""
        lag = self.settings.txns.offset_lag_s if seconds <= 0 else seconds
        self.txns.settings = dataclasses.replace(self.txns.settings, offset_lag_s=lag)

    def stale_offsets(self, group_id: str, answers: int) -> None:
        """The group's committed offsets as they are now are what its next ``answers``
        stable OffsetFetch answers give (RequireStable: an application's, not a test's
        reader's), whatever is committed meanwhile -- as genuine 4.4.0 answered for a
        moment from a group coordinator SIGSTOPped while another broker took the group
        over, once it ran again and before it learnt so."""
        g = self.groups.groups[group_id]
        g.stale, g.stale_answers = dict(g.offsets), answers

    def stale_log(self, topic: str, seconds: float) -> None:
        """For ``seconds``, Fetch and ListOffsets answer ``topic``'s partitions as they
        are now -- their high watermarks and last stable offsets, no record written later
        -- while writes go on: as genuine 4.4.0's leader, SIGSTOPped past its broker
        session while another broker took its partitions over, answered Fetch (without
        an error) and ListOffsets from the log it held for 0.1-0.8 s once it resumed."""
        for log in self.topics[topic]:
            log.go_stale(seconds)

    def force_rebalance(self, group_id: str) -> None:
        """A rebalance now: a classic group prepares one; a consumer-protocol group has
        its members removed, as their session timing out would, so that they rejoin."""
        g = self.groups.get(group_id)
        if g is not None and g.modern is not None:
            for member_id in list(g.modern.members):
                self.consumer_groups.remove(g.modern, member_id)
            return
        self.groups.force_rebalance(group_id)

    def expire_member(self, group_id: str, member_id: str | None = None) -> list[str]:
        return self.groups.expire_member(group_id, member_id)

    # --- serving ----------------------------------------------------------------------

    async def _session_sweeper(self) -> None:
        while True:
            await asyncio.sleep(self.settings.session_check_interval_s)
            for mid in self.groups.expire_sessions():
                log.info("evicted member %s: session timed out", mid)
            for mid in self.consumer_groups.expire():
                log.info("removed member %s: its session or revocation timed out", mid)

    async def _txn_sweeper(self) -> None:
        while True:
            await asyncio.sleep(self.settings.txns.sweep_interval_s)
            for txn in self.txns.abort_expired():
                log.info("aborted transaction of %s: transaction timeout", txn)

    async def _retention_sweeper(self) -> None:
        while True:
            await asyncio.sleep(self.settings.retention_check_interval_s)
            for topic, p, start in self.expire_logs(int(time.time() * 1000)):
                log.info("deleted %s[%d] below offset %d: retention.ms passed", topic, p, start)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = peer[0] if peer else "127.0.0.1"
        self._writers.add(writer)
        sec = self.settings.security
        sasl = SaslConnection(sec) if sec is not None and sec.users is not None else None
        task = asyncio.current_task()
        if task is not None:
            self._conn_tasks.add(task)
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = struct.unpack(">i", head)
                if not 0 < size <= _MAX_FRAME:
                    log.warning("closing %s: bad frame size %d", host, size)
                    return
                data = await reader.readexactly(size)
                if task is not None:
                    self._busy.add(task)
                try:
                    if self.settings.latency_s:
                        await asyncio.sleep(self.settings.latency_s)
                    out = await self._answer(data, host, sasl)
                    if out is None:
                        return
                    writer.write(out)
                    await writer.drain()
                    if sasl is not None and sasl.close_after_answer:
                        return  # a refused login: answered, then closed, as Kafka
                finally:
                    if task is not None:
                        self._busy.discard(task)
                if self._closing:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        except asyncio.CancelledError:
            return  # the cluster is stopping; the connection just closes
        finally:
            if task is not None:
                self._conn_tasks.discard(task)
            self._writers.discard(writer)
            writer.close()

    async def _answer(
        self, data: bytes, host: str, sasl: SaslConnection | None = None
    ) -> bytes | None:
        """The encoded answer to one request, or None to close the connection."""
        try:
            frame = _codec.decode_request(data)
        except _codec.UnsupportedRequest as u:
            if u.api_key == 18:
                return _codec.encode_api_versions_error(u.correlation_id, self.api_versions())
            log.warning("closing connection: unsupported request %s", u)
            return None
        except Exception as exc:  # a malformed frame closes only its connection
            log.warning("closing connection: malformed request: %s", exc)
            return None
        if not self._accepts(frame.api_key, frame.version):
            if frame.api_key == 18:
                return _codec.encode_api_versions_error(frame.correlation_id, self.api_versions())
            log.warning(
                "closing connection: %s v%d not in profile %s",
                frame.api_name,
                frame.version,
                self.settings.profile,
            )
            return None
        if sasl is not None and not sasl.done:
            if not sasl.allowed(frame.api_key):
                log.warning("closing connection: %s before SASL login", frame.api_name)
                return None
            if frame.api_key == 17:
                return _codec.encode_response(frame, sasl.handshake(frame.body))
            if frame.api_key == 36:
                return _codec.encode_response(frame, sasl.authenticate(frame.body))
        rule = self._match_fault(frame)
        if rule is not None:
            rule._matched.set()
            if rule.hold:
                await rule._released.wait()
            if rule.delay_s:
                await asyncio.sleep(rule.delay_s)
            if rule.drop:
                return None
            if rule.error is not None:
                body = error_body(frame, rule.error, self._brokers())
                return _codec.encode_response(frame, body)
        body = await HANDLERS[frame.api_key](self, frame, host)
        if rule is not None and rule.drop_response:
            return None
        return _codec.encode_response(frame, body)

    def _brokers(self) -> list[dict[str, Any]]:
        return [{"node_id": self.node_id, "host": self.host, "port": self.port, "rack": None}]

    def _match_fault(self, frame: _codec.Frame) -> FaultRule | None:
        for rule in self.faults:
            if rule.matches(frame):
                rule.hits += 1
                rule.bodies.append(frame.body)
                if rule.exhausted:
                    self.faults.remove(rule)
                return rule
        return None
