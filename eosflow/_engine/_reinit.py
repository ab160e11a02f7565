"""KIP-360: a transactional producer's id re-initialised after an outcome only the
broker knows, for ``TransactSession``'s recovery.

A refused re-initialisation (PRODUCER_FENCED) does not prove a newer instance. The
coordinator accepts our last epoch after it timed our transaction out only while it
remembers that epoch, and it keeps it in memory: the transaction log has no field for
it (``TransactionLogValue``), so a coordinator that moved to another broker since (a
broker stopped, killed or restarted) refuses the epoch it bumped itself. The group
tells the two apart: each member's client id names its transactional id and start
(``ak.member_client_id``), and a newer instance of our id is a member that started
after us. None: our epoch was only forgotten, and the replacement producer initialises
the id afresh, as a restart would. The trade-off: a newer instance that fenced us but has
not joined the group yet is fenced back; its next transaction is refused in turn, it finds
us in the group as the older member and goes on after us -- each check ends with one
owner, and the group's generation keeps every commit of the other exactly once. Two
instances that cannot see each other so (another group, or a producer that is no
eosflow member) would take the id from each other for ever: a second refusal within
``retry_timeout_s`` of taking the id afresh is fatal. "Newer" compares the two hosts'
clocks: skewed by more than the time between two starts, the older instance goes on
and the newer one stops -- still exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import AuthorizationError, EosflowError, ProducerFencedError, TransientError

log = logging.getLogger("eosflow.session")


@dataclass
class IdClaim:
    """This instance's hold on its transactional id: when it started (its group member's
    client id says so) and when it last took the id afresh after a refusal."""

    started_us: int = field(default_factory=lambda: time.time_ns() // 1000)
    taken_at: float | None = None  # time.monotonic()


async def reinit(
    producer: AIOKafkaProducer,
    config: EosConfig,
    caps: ak.Capabilities | None,
    fenced: str | None,
    claim: IdClaim,
) -> None:
    """Re-initialise ``producer``'s id after an unknown outcome, a failed produce or a
    fencing answer (``fenced``: the answer). With KIP-360 an InitProducerId with the
    current id and epoch bumps the epoch and keeps the id; a refusal is
    ``ProducerFencedError`` when the group has a member of our transactional id started
    after ``claim`` (``newer_member``) or the id was taken afresh less than
    ``retry_timeout_s`` ago, and otherwise returns: the replacement producer's
    InitProducerId takes the id afresh. Without KIP-360 a fencing answer is
    final, and otherwise nothing happens here: the replacement producer's InitProducerId
    aborts and bumps instead. Another failure is logged and the caller replaces the
    producer (unless it followed a fencing answer, which only the broker's answer could
    have resolved: fenced)."""
    txn_id = config.transactional_id
    assert caps is not None
    if fenced is not None and not caps.kip360:
        # final either way; the line says which it most likely was
        try:
            newer = await newer_member(config, claim.started_us)
        except EosflowError:
            newer = "(group not described)"
        if newer is not None:
            raise ProducerFencedError(txn_id, f"{fenced}; newer member {newer}")
        raise ProducerFencedError(txn_id, fenced, timed_out=True)
    if not caps.kip360:
        return  # the replacement producer's InitProducerId aborts and bumps instead
    try:
        with ak.mapped("InitProducerId (KIP-360)"):
            cfg = config
            # after a fencing answer only the broker's answer tells a timed-out epoch
            # from a newer instance: wait for it as long as for any broker failure
            budget = cfg.retry_timeout_s if fenced else cfg.transaction_timeout_s
            await ak.reinit_producer_id(
                producer, cfg.transactional_id, cfg.transaction_timeout_s, timeout_s=budget
            )
    except ak.Fenced as exc:
        refused = fenced or str(exc)
        try:
            newer = await newer_member(config, claim.started_us)
        except EosflowError as why:  # a newer instance not ruled out: the safe answer
            detail = f"{refused}; group {config.group_id!r} not described: {why}"
            raise ProducerFencedError(txn_id, detail) from None
        if newer is not None:
            raise ProducerFencedError(txn_id, f"{refused}; newer member {newer}") from None
        now = time.monotonic()
        if claim.taken_at is not None and now - claim.taken_at < config.retry_timeout_s:
            again = (
                f"{refused}; refused again {now - claim.taken_at:.1f} s after the id was "
                f"taken afresh, with no newer member in group {config.group_id!r}: an "
                "instance of another group, or no eosflow member, uses it"
            )
            raise ProducerFencedError(txn_id, again) from None
        claim.taken_at = now
        log.warning(
            "the broker refused our epoch (%s), yet no member of group %r started after "
            "us with transactional id %r: a coordinator that moved since it timed our "
            "transaction out forgets our epoch; initialising the id afresh",
            exc,
            config.group_id,
            txn_id,
        )
    except AuthorizationError:
        raise
    except EosflowError as exc:
        if fenced is not None:
            raise ProducerFencedError(txn_id, fenced) from None
        log.warning("KIP-360 re-initialisation failed (%s); replacing the producer", exc)


async def newer_member(config: EosConfig, started_us: int) -> str | None:
    """The group's member of ``config``'s transactional id started after ``started_us``
    (its client id, host and member id), or None. A member started before is a crashed
    predecessor whose session has not expired yet; one started at ``started_us`` is us.
    A broker that cannot answer is asked again for ``retry_timeout_s``; then its
    ``TransientError`` (and at once any other error of the description)."""
    cfg = config
    deadline, delay = time.monotonic() + cfg.retry_timeout_s, cfg.retry_backoff_s
    while True:
        try:
            view = await ak.describe_group(cfg.bootstrap_servers, cfg.security, cfg.group_id)
            break
        except TransientError:
            if time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, cfg.retry_backoff_max_s)
    for m in view.members:
        began = ak.member_started(cfg, m.client_id)
        if began is not None and began > started_us:
            return f"{m.client_id}@{m.host.lstrip('/')} ({m.member_id})"
    return None
