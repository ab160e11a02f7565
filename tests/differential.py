"""Helpers of the tests that hold a compiled path (``eosflow._native``) to the Python
method it replaces over random runs: an outcome to compare, and a transaction's commit
into a real local copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eosflow._state._layers import Layers
from eosflow._state._local import Checkpoint, LocalPartition


def comparable(value: Any) -> Any:
    """``value`` with its type, and what never equals itself (NaN, an ``object()`` read
    back) named."""
    if isinstance(value, float) and value != value:
        return ("nan",)
    if type(value) is object:
        return ("object",)
    if type(value) is list:
        return [comparable(v) for v in value]
    if type(value) is tuple:
        return tuple(comparable(v) for v in value)
    return (type(value), value)


def outcome(call: Callable[[], Any]) -> Any:
    """What ``call`` gave, comparable, or the error it raised: its type and its words."""
    try:
        value = call()
    except Exception as exc:  # the same error, same words
        return ("raised", type(exc), str(exc))
    return comparable(value)


def commit(layers: Layers, local: LocalPartition) -> None:
    """The open transaction sealed, written to ``local`` and committed; the next one
    begins with the work ahead adopted, as the engine's commit does."""
    sealed = layers.seal()
    changes = {name: dict(w) for (name, _), w in sealed.items()}
    local.apply(changes, {n: Checkpoint(1, 0, 1) for n in changes})
    layers.committed()
    layers.begin(adopted=True)


def transaction_move(world: Any, op: str, take_back: bool) -> None:
    """The transaction move ``op`` names on ``world`` (its ``layers``, its ``undo`` list
    or None, its ``commit``): seal, commit, discard, an undoable unit started, or ended
    (``take_back``: its writes taken back, as a dead-lettered record's). Seal, commit
    and discard wait while a unit is open, as the engine's do."""
    layers = world.layers
    if world.undo is not None and op in ("seal", "commit", "discard"):
        return  # (a record's writes are undone or kept before the transaction moves)
    if op == "seal":
        layers.seal()
    elif op == "commit":
        world.commit()
    elif op == "discard":
        layers.discard()
        layers.begin(adopted=False)
    elif op == "undo_start" and world.undo is None:
        world.undo = layers.start_undo()
    elif op == "undo_end" and world.undo is not None:
        if take_back:
            layers.revert(world.undo)
        layers.undo, world.undo = None, None
