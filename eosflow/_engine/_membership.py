"""Group membership, one seam for two protocols: the session asks its ``Membership`` for
the consumer, the identity an offset commit carries, and the forced heartbeat before
EndTxn; the membership calls the session back when partitions go (``revoked``, awaited
before anything moves) and come (``assigned``).

- ``ClassicGroup``: aiokafka's group consumer (JoinGroup/SyncGroup, eager: a rebalance
  revokes every partition). The forced heartbeat is a Heartbeat with the generation the
  transaction's partitions were assigned under. After each assignment, crashed earlier
  instances of our transactional id are removed from the group (``_predecessors``).
- ``ConsumerGroup``: the consumer group protocol (KIP-848, Kafka 4.0+ with
  ``group.version`` >= 1), which aiokafka lacks: eosflow is the member and sends
  ConsumerGroupHeartbeat itself; aiokafka's consumer only fetches what it is assigned.
  Assignment is server-side and incremental: only partitions that move are revoked, and a
  partition reaches its new owner only once this member acknowledged giving it up -- after
  ``revoked`` returned, so never while an EndTxn is in flight (the session lock). The
  offsets and the forced heartbeat of a commit run with heartbeats held back
  (``committing``), so the member epoch the offsets carry is the one the broker holds.
  Fenced (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) or silent past the session timeout, the
  member has lost every partition: ``revoked`` is told, and it rejoins with epoch 0.

Trade-off: the consumer protocol's heartbeat interval and session timeout are the
broker's (``group.consumer.*``), not ``heartbeat_interval_s``/``session_timeout_s``; a
heartbeat answer that is an error the protocol does not expect is a ``FatalError``, but
UNKNOWN_SERVER_ERROR (a broker's passing failure, as the fault matrix injects it) is
retried like a lost answer, the member lost once ``session_timeout_s`` passes without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import EosflowError, FatalError, TransientError
from .._observe import Abort, AbortReason
from .._protocol import codes
from .._timeouts import within
from ._commit import confirm_membership
from ._predecessors import remove_predecessors

log = logging.getLogger("eosflow.session")

PartitionsCall = Callable[[set[TopicPartition]], Awaitable[None]]

# answers after which this member holds nothing: it rejoins with epoch 0
_LOST = frozenset({codes.FENCED_MEMBER_EPOCH, codes.UNKNOWN_MEMBER_ID, codes.GROUP_ID_NOT_FOUND})


class Membership(Protocol):
    consumer: AIOKafkaConsumer
    incremental: bool  # a revocation takes only the partitions that move
    # the member id and epoch an offset fetch names (None when lost); None: it names none
    offsets_member: Callable[[], tuple[str, int] | None] | None

    async def start(self) -> None: ...
    def identity(self) -> ak.GroupIdentity: ...
    def committing(
        self, identity: ak.GroupIdentity | None
    ) -> contextlib.AbstractAsyncContextManager[ak.GroupIdentity]: ...
    async def confirm(
        self, caps: ak.Capabilities, identity: ak.GroupIdentity, timeout_s: float
    ) -> Abort | None: ...
    async def leave(self) -> None: ...


def membership_for(
    config: EosConfig,
    protocol: str,
    revoked: PartitionsCall,
    assigned: PartitionsCall,
    failed: Callable[[Exception], None],
    ranged: bool = False,
    client_id: str | None = None,
) -> Membership:
    """The membership of ``protocol`` (``_protocols.choose``: "classic" or "consumer").
    ``ranged``: partition p of every topic goes to one member (tables need it): the
    classic protocol's range assignor, or the broker's ``range`` assignor (KIP-848).
    ``client_id``: the member's (``ak.member_client_id``), else the config's."""
    if protocol == "consumer":
        return ConsumerGroup(config, revoked, assigned, failed, ranged, client_id)
    return ClassicGroup(config, revoked, assigned, failed, ranged, client_id)


class ClassicGroup:
    incremental = False
    # aiokafka's generation is checked by commits, not fetches
    offsets_member: Callable[[], tuple[str, int] | None] | None = None

    def __init__(
        self,
        config: EosConfig,
        revoked: PartitionsCall,
        assigned: PartitionsCall,
        failed: Callable[[Exception], None],
        ranged: bool = False,
        client_id: str | None = None,
    ) -> None:
        self.config = config
        # our start, when the member's client id names it: earlier instances of our
        # transactional id are removed after each assignment (``_predecessors``)
        started = None if client_id is None else ak.member_started(config, client_id)
        self._started = None if config.group_instance_id is not None else started
        self._sweep: asyncio.Task[None] | None = None
        self._again = False  # an assignment came while a sweep ran: sweep once more

        async def assigned_then_sweep(partitions: set[TopicPartition]) -> None:
            await assigned(partitions)
            self._sweep_predecessors()

        self.consumer = ak.consumer_for(
            config, revoked, assigned_then_sweep, failed, ranged, client_id
        )

    def _sweep_predecessors(self) -> None:
        """Remove crashed earlier instances of our id from the group, in the background:
        one sweep at a time, and one more after it when an assignment came meanwhile (the
        running one may have described the group before that generation formed)."""
        if self._started is None:
            return
        if self._sweep is not None and not self._sweep.done():
            self._again = True
            return
        self._sweep = asyncio.get_running_loop().create_task(
            self._sweeps(self._started), name="eosflow-predecessors"
        )

    async def _sweeps(self, started_us: int) -> None:
        while True:
            self._again = False
            await remove_predecessors(self.config, started_us)
            if not self._again:
                return

    async def start(self) -> None:
        await ak.start(self.consumer, self.config, "joining the group", "READ")

    def identity(self) -> ak.GroupIdentity:
        return ak.group_identity(self.consumer)

    @contextlib.asynccontextmanager
    async def committing(
        self, identity: ak.GroupIdentity | None
    ) -> AsyncIterator[ak.GroupIdentity]:
        """The generation the partitions were assigned under (KIP-447 fences the rest)."""
        yield identity or self.identity()

    async def confirm(
        self, caps: ak.Capabilities, identity: ak.GroupIdentity, timeout_s: float
    ) -> Abort | None:
        return await confirm_membership(self.consumer, self.config, caps, identity, timeout_s)

    async def leave(self) -> None:
        """Closing the consumer leaves the group; a sweep still running is stopped."""
        if self._sweep is not None and not self._sweep.done():
            self._sweep.cancel()
            try:
                await self._sweep
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # our own stop was cancelled, not only the sweep


class ConsumerGroup:
    incremental = True

    def __init__(
        self,
        config: EosConfig,
        revoked: PartitionsCall,
        assigned: PartitionsCall,
        failed: Callable[[Exception], None],
        ranged: bool = False,
        client_id: str | None = None,
    ) -> None:
        self.config = config
        self.consumer = ak.manual_consumer(config, client_id)
        self._assignor = "range" if ranged else None  # None: the broker's default
        self.member_id = str(uuid.uuid4())  # ConsumerGroupHeartbeat v1: the member's own
        self.epoch = 0
        self.owned: set[TopicPartition] = set()
        self._revoked, self._assigned, self._failed = revoked, assigned, failed
        self._target: set[TopicPartition] | None = None  # answered, not yet reconciled
        self._lost = False
        self._names: dict[uuid.UUID, str] = {}
        self._interval_s = config.heartbeat_interval_s  # until the broker says
        self._last_ok = time.monotonic()
        self._send = asyncio.Lock()  # one heartbeat at a time; held while committing
        self._wake = asyncio.Event()  # heartbeat now
        self._changed = asyncio.Event()  # a target or a loss for the reconciler
        self._task: asyncio.Task[None] | None = None
        self.offsets_member: Callable[[], tuple[str, int] | None] | None = self._member

    def _member(self) -> tuple[str, int] | None:
        """The member id and epoch an OffsetFetch v9 names; None once lost (the fetch
        stops: the loss lets every partition go and rejoins)."""
        return None if self._lost or self.epoch <= 0 else (self.member_id, self.epoch)

    async def start(self) -> None:
        """Start the consumer and join: the first heartbeat's refusal is raised here."""
        await ak.start(self.consumer, self.config, "starting the consumer", "READ")
        code = await self._beat()
        if code:
            raise FatalError(f"joining group {self.config.group_id!r}: {ak.error_name(code)}")
        self._task = asyncio.create_task(self._run(), name="eosflow-membership")

    def identity(self) -> ak.GroupIdentity:
        return ak.GroupIdentity(self.epoch, self.member_id, self.config.group_instance_id, None)

    @contextlib.asynccontextmanager
    async def committing(
        self, identity: ak.GroupIdentity | None
    ) -> AsyncIterator[ak.GroupIdentity]:
        """Heartbeats held back while the offsets go, and again while the forced
        heartbeat goes: the epoch the offsets carry is the member's at the broker (a
        heartbeat answered meanwhile could move it). One answered between the two may
        move it: the offsets were accepted under the epoch they carry, and the
        transaction's partitions cannot have moved since it began -- a revocation waits
        for the session lock that ``end`` holds."""
        async with self._send:
            yield self.identity()

    async def confirm(
        self, caps: ak.Capabilities, identity: ak.GroupIdentity, timeout_s: float
    ) -> Abort | None:
        """The forced heartbeat (called inside ``committing``): answered without error,
        the member holds its partitions; a new assignment it brings is reconciled by the
        heartbeat loop afterwards."""
        if self._lost or self.epoch <= 0:
            return Abort(AbortReason.HEARTBEAT_FAILED, "group membership lost: rejoining")
        try:
            code = await within(self._beat_locked(), timeout_s)
        except (EosflowError, TimeoutError) as exc:
            return Abort(AbortReason.HEARTBEAT_FAILED, f"forced heartbeat failed: {exc!r}")
        if code:
            return Abort(AbortReason.HEARTBEAT_FAILED, f"forced heartbeat: {ak.error_name(code)}")
        return None

    async def leave(self) -> None:
        """Leave the group (epoch -1; -2 for a static member, which keeps its partitions
        until its session ends), best effort."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.epoch <= 0:
            return
        self.epoch = -2 if self.config.group_instance_id is not None else -1
        with contextlib.suppress(EosflowError, TimeoutError):
            await within(self._beat(), 5.0)

    # --- the heartbeat loop and the reconciler -----------------------------------------

    async def _run(self) -> None:
        """Heartbeats, every interval or at once when woken (an acknowledgement). They go
        on while the reconciler waits (for an EndTxn in flight, a stable offset fetch, a
        hook), so a slow reconciliation does not cost the membership. After a loss none
        goes until the reconciler has let every partition go: a rejoin owns nothing."""
        reconciler = asyncio.create_task(self._reconciler(), name="eosflow-reconciler")
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await within(self._wake.wait(), self._interval_s)
                self._wake.clear()
                if self._lost:
                    continue  # the reconciler wakes us once it let go
                try:
                    await self._beat()
                except EosflowError as exc:
                    if isinstance(exc, FatalError):
                        raise
                    log.warning("heartbeat failed: %s", exc)
                    if time.monotonic() - self._last_ok > self.config.session_timeout_s:
                        self._lose()  # the broker has removed us by now
                    await asyncio.sleep(self.config.retry_backoff_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never silent: poll() raises it
            self._failed(_stopped(exc))
        finally:
            reconciler.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reconciler

    async def _reconciler(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                await self._reconcile()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed(_stopped(exc))
                return

    def _lose(self) -> None:
        """Every partition is gone (fenced, unknown, silent past the session): the
        reconciler tells the session, then the member rejoins with epoch 0."""
        self._lost, self.epoch = True, 0
        self._changed.set()

    async def _beat(self) -> int:
        async with self._send:
            return await self._beat_locked()

    async def _beat_locked(self) -> int:
        """One heartbeat with what this member owns; returns the error code answered."""
        cfg = self.config
        ids = {name: tid for tid, name in self._names.items()}
        owned: dict[uuid.UUID, list[int]] = {}
        for tp in sorted(self.owned):
            if tp.topic in ids:
                owned.setdefault(ids[tp.topic], []).append(tp.partition)
        body: dict[str, Any] = {
            "group_id": cfg.group_id,
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "instance_id": cfg.group_instance_id,
            "rack_id": None,
            "rebalance_timeout_ms": int(cfg.rebalance_timeout_s * 1000),
            "subscribed_topic_names": list(cfg.input_topics),
            "server_assignor": self._assignor,
            "topic_partitions": [{"topic_id": t, "partitions": ps} for t, ps in owned.items()],
        }
        answer = await ak.group_heartbeat(
            self.consumer, cfg.group_id, body, cfg.transaction_timeout_s / 4
        )
        if answer.code in _LOST:
            log.warning("group membership lost (%s): rejoining", ak.error_name(answer.code))
            self._lose()
            return answer.code
        if answer.code:
            why = f"{ak.error_name(answer.code)} ({answer.message})"
            if answer.code == codes.UNKNOWN_SERVER_ERROR:  # a broker's passing failure
                raise TransientError("ConsumerGroupHeartbeat", why)  # until the session ends
            raise FatalError(f"ConsumerGroupHeartbeat: {why}")
        self.epoch, self._last_ok = answer.epoch, time.monotonic()
        if answer.interval_s > 0:
            self._interval_s = answer.interval_s
        if answer.assignment is not None:
            self._target = await self._resolve(answer.assignment)
            self._changed.set()
        return 0

    async def _resolve(self, assignment: dict[uuid.UUID, list[int]]) -> set[TopicPartition]:
        if not set(assignment) <= set(self._names):
            self._names = await ak.topic_ids(
                self.consumer, list(self.config.input_topics), self.config.transaction_timeout_s
            )
        return {
            TopicPartition(self._names[tid], p)
            for tid, parts in assignment.items()
            if tid in self._names
            for p in parts
        }

    async def _reconcile(self) -> None:
        """Revoke what the target leaves out (the session first: it waits for a commit
        in flight), then take on what it adds; acknowledge at once. A hook of the
        processor that raises is logged, as aiokafka does, and the step goes on: the
        session had already let the partitions go or positioned them."""
        if self._lost:
            self._target = None
            gone, self.owned = self.owned, set()
            ak.reassign(self.consumer, self.owned)
            if gone:
                await _tell(self._revoked, gone, "revoked")
            self._lost = False
            self._wake.set()
            return
        target, self._target = self._target, None
        if target is None:
            return
        gone = self.owned - target
        if gone:
            await _tell(self._revoked, gone, "revoked")
            self.owned -= gone
            ak.reassign(self.consumer, self.owned)
        new = target - self.owned
        if new:
            self.owned |= new
            ak.reassign(self.consumer, self.owned)  # the new ones paused, to be positioned
            try:
                await self._assigned(new)
            except EosflowError as exc:
                if self._lost:  # the loss that stopped the set-up lets them go next
                    log.info("setting up %d partitions stopped: membership lost", len(new))
                    return
                self._failed(exc)  # unpositioned, they would stall: poll() raises it
            except Exception as exc:  # the processor's hook, after the set-up
                log.error("on_assigned raised %r; going on", exc)
        if gone or new:
            self._wake.set()


async def _tell(call: PartitionsCall, tps: set[TopicPartition], what: str) -> None:
    try:
        await call(tps)
    except EosflowError:
        raise
    except Exception as exc:  # the processor's hook, after the session let them go
        log.error("on_%s raised %r; going on", what, exc)


class MembershipStopped(FatalError):
    """The consumer protocol's membership cannot go on; ``poll()`` raises it as is."""


def _stopped(exc: BaseException) -> MembershipStopped:
    if isinstance(exc, FatalError):
        return MembershipStopped(f"group membership stopped: {exc}")
    return MembershipStopped(f"group membership stopped: unexpected {exc!r}")
