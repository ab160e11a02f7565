"""``StateSettings``: what the state room reads of the app's settings, taken once.

The room never holds the whole ``EosConfig``: the session hands it these fields
(``state_settings``) and a way to open the read_committed consumers it restores and
reads tables with (``reader``: the adapter's ``state_reader`` on the app's connection
settings -- bootstrap servers, security, client id -- which the room needs only through
it). A setting the room starts to need is added here, where the whole list is read. The
room's one function of the whole config is ``subscribed`` (``_tables``): config in,
config out -- what the session subscribes to once tables' topics are added.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer

from .. import _aiokafka as ak

if TYPE_CHECKING:
    from .._config import EosConfig

__all__ = ["StateSettings", "state_settings"]

#: opens a started read_committed consumer outside the group: (role, poll_ms) -> it
Reader = Callable[[str, int], Awaitable[AIOKafkaConsumer]]


@dataclass(frozen=True)
class StateSettings:
    """The settings the state room runs on (each as ``EosConfig`` documents it)."""

    group_id: str
    transactional_id: str
    input_topics: tuple[str, ...]
    state_dir: str
    state_cache_bytes: int
    changelog_replication_factor: int
    dead_letter_topic: str | None
    transaction_timeout_s: float
    retry_timeout_s: float
    retry_backoff_s: float
    retry_backoff_max_s: float
    reader: Reader


def state_settings(config: EosConfig) -> StateSettings:
    """The state room's settings out of the app's ``config``."""
    return StateSettings(
        group_id=config.group_id,
        transactional_id=config.transactional_id,
        input_topics=tuple(config.input_topics),
        state_dir=str(config.state_dir),
        state_cache_bytes=config.state_cache_bytes,
        changelog_replication_factor=config.changelog_replication_factor,
        dead_letter_topic=config.dead_letter_topic,
        transaction_timeout_s=config.transaction_timeout_s,
        retry_timeout_s=config.retry_timeout_s,
        retry_backoff_s=config.retry_backoff_s,
        retry_backoff_max_s=config.retry_backoff_max_s,
        reader=functools.partial(ak.state_reader, config),
    )
