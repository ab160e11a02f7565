"""Every API the test cluster answers, one handler each, grouped by the part of a broker
that owns it (kfake-style): ``_handlers_admin`` (metadata, topics, configs, coordinator
lookup), ``_handlers_log`` (produce, fetch, offsets by time), ``_handlers_groups`` (the
group coordinator), ``_handlers_txn`` (the transaction coordinator). Each handler opens
with the behaviour it models and the version notes that matter; ``_api`` is the registry.
"""

from __future__ import annotations

from . import _handlers_admin, _handlers_groups, _handlers_log, _handlers_txn
from ._api import HANDLERS

__all__ = ["HANDLERS"]
_MODULES = (_handlers_admin, _handlers_groups, _handlers_log, _handlers_txn)  # registered
