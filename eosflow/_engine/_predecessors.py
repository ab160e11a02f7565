"""A crashed predecessor removed from a classic group, for ``ClassicGroup``.

Each member's client id names its transactional id and start (``ak.member_client_id``).
After each assignment under the classic protocol, a member looks at the group
(DescribeGroups) and removes every member of its own transactional id -- the same client
id and transactional id exactly, so ``app-0`` leaves ``green-app-0`` alone -- that started
before it (LeaveGroup on its behalf, ``ak.remove_member``): an earlier instance of the
same id, restarted since. It cannot commit any more -- this member's InitProducerId
fenced its producer before it joined -- so its partitions are better given to the
living at once than held until its session expires.

On Kafka before 2.5.1 they may never be given back otherwise (KAFKA-9752, reproduced on
genuine 2.4.1): a member killed after its JoinGroup was answered and before it sent
SyncGroup keeps no session timer, stays in the stable generation and holds its
partitions until some later rebalance -- the likeliest cause of a CI chaos run that
stalled, one input partition of four never committed for three minutes. Removing it
starts a rebalance without it.

Not done with static membership (``group_instance_id``: a restarted member takes over
its predecessor's place itself) nor under the consumer protocol (KIP-848: the broker
expires every member by its heartbeats). An earlier instance still running (a zombie)
rejoins after its removal; its next transaction is refused (its producer is fenced) and
it stops (``_reinit``), after which the next assignment finds nothing to remove.
Best effort: a failure is logged and the next assignment tries again.
"""

from __future__ import annotations

import asyncio
import logging
import time

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import EosflowError, TransientError

log = logging.getLogger("eosflow.session")


async def remove_predecessors(config: EosConfig, started_us: int) -> list[str]:
    """Remove from ``config``'s group every member of its transactional id that started
    before ``started_us``; returns their client ids. A broker that cannot answer is
    asked again for ``retry_timeout_s``; what fails then is logged, not raised."""
    cfg = config
    deadline, delay = time.monotonic() + cfg.retry_timeout_s, cfg.retry_backoff_s
    while True:
        try:
            return await _remove(cfg, started_us)
        except TransientError as exc:
            if time.monotonic() + delay > deadline:
                log.warning("looking for a crashed predecessor in the group failed: %s", exc)
                return []
            await asyncio.sleep(delay)
            delay = min(delay * 2, cfg.retry_backoff_max_s)
        except EosflowError as exc:
            log.warning("looking for a crashed predecessor in the group failed: %s", exc)
            return []


async def _remove(cfg: EosConfig, started_us: int) -> list[str]:
    view = await ak.describe_group(cfg.bootstrap_servers, cfg.security, cfg.group_id)
    ours = f"{cfg.client_id}-{cfg.transactional_id}"  # exactly: not "green-" + ours
    removed = []
    for m in view.members:
        began = ak.member_started(cfg, m.client_id)
        if began is None or began >= started_us or m.client_id.rpartition("-")[0] != ours:
            continue
        if await ak.remove_member(cfg.bootstrap_servers, cfg.security, cfg.group_id, m.member_id):
            held = ", ".join(f"{t}[{p}]" for t, p in m.partitions) or "nothing"
            log.warning(
                "removed %s (%s) from the group: an earlier instance of transactional id "
                "%r, fenced by this one, still held %s",
                m.client_id,
                m.member_id,
                cfg.transactional_id,
                held,
            )
            removed.append(m.client_id)
    return removed
