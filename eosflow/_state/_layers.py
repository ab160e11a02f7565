"""``Layers``: the store writes not yet on disk, by the unit of work they belong to.

- ``open``: writes of the work in hand -- the open transaction, or, while a transaction
  commits, the work processed ahead of the next one;
- ``sealed``: writes of the transaction that is committing (frozen by ``seal``).

Each maps a store partition (store name, (topic, partition)) to its writes: key ->
serialized value, or None for a delete (a ``Writes``: a dict that answers key ranges
from a sorted index once one was read, ``_sorted``). A read looks in ``open``, then ``sealed``, then
on disk. The transaction's life moves the layers:

    begin(adopted)   open <- the work done ahead if it was adopted, else nothing
    seal()           sealed <- open; open <- nothing   (once per transaction: a second
                     call before the next begin changes nothing)
    committed        sealed goes to disk (by the caller), then is emptied
    discard()        both emptied: an abort, a recovery, or work ahead dropped

Replacing a dict whole rather than clearing it keeps a reader holding the old one
consistent; nothing here awaits, so a layer never changes under a running read.

**Deferred writes.** A writer that would write one key at every record -- a window's
stream time -- may instead keep the value itself and register (``defer``): its
``write_deferred`` is called once, just before the open layer is sealed, and before an
undoable unit starts (``start_undo``: a record, batch or timer fire whose writes are
taken back if it fails), so that taking a unit back never takes a deferred value with
it. ``generation`` counts the times writes were dropped or taken back (``begin`` of
work not adopted, ``discard``, ``revert``) or the local copies changed under the layers
(``stores_changed``, once a restore ends): a writer holding a value of its own reads the
store again when it moved, and what it deferred is dropped with dropped writes.
"""

from __future__ import annotations

from typing import Any, Protocol

from ._sorted import Writes

Slot = tuple[str, tuple[str, int]]
Undo = list[tuple[Writes, bytes, Any]]  # (writes, key, the key's old entry or MISSING)
MISSING = object()  # a key without a write in a layer (an undo entry's old value)


class Deferred(Protocol):
    def write_deferred(self) -> None:
        """Make the write held back, into the open layer."""


class Layers:
    __slots__ = ("_is_sealed", "deferred", "generation", "open", "sealed", "undo")

    def __init__(self) -> None:
        self.open: dict[Slot, Writes] = {}
        self.sealed: dict[Slot, Writes] = {}
        self._is_sealed = False
        # while one record is processed: its writes, so that a record that fails (and
        # is dead-lettered) leaves none behind
        self.undo: Undo | None = None
        self.generation = 0  # writes dropped or taken back, copies restored, so far
        self.deferred: list[Deferred] = []  # replaced, not cleared, once they are written

    def begin(self, adopted: bool) -> None:
        """A transaction opens: it keeps ``open`` only if it adopted the work done ahead
        (whose writes those are); anything else there is stale."""
        if not adopted:
            self.open = {}
            self._dropped()
        self.sealed = {}
        self._is_sealed = False

    def seal(self) -> dict[Slot, Writes]:
        """Freeze the transaction's writes for its commit; later writes are work done
        ahead of the next transaction. Returns what was sealed."""
        if not self._is_sealed:
            self._write_deferred()
            self.sealed, self.open = self.open, {}
            self._is_sealed = True
        return self.sealed

    def committed(self) -> None:
        self.sealed = {}

    def discard(self) -> None:
        self.open, self.sealed = {}, {}
        self._is_sealed = False
        self._dropped()

    def defer(self, writer: Deferred) -> None:
        """``writer.write_deferred()`` before the open layer is sealed or an undoable unit
        starts (``writer`` registers once per list: ``deferred`` is a new one after)."""
        self.deferred.append(writer)

    def start_undo(self) -> Undo:
        """An undoable unit starts: the deferred writes are made, then its writes are
        recorded in the list returned (``undo``) until the caller sets ``undo`` back to
        None."""
        self._write_deferred()
        undo: Undo = []
        self.undo = undo
        return undo

    def stores_changed(self) -> None:
        """The local copies under the layers changed (a partition restored): deferred
        writes are made, and every writer holding a value of its own reads it again."""
        self._write_deferred()
        self.generation += 1

    def _write_deferred(self) -> None:
        if self.deferred:
            for writer in self.deferred:
                writer.write_deferred()
            self.deferred = []

    def _dropped(self) -> None:
        self.generation += 1
        self.deferred = []

    def revert(self, undo: Undo) -> None:
        """Take back the writes ``undo`` recorded, newest first. Nothing may be deferred
        then (``start_undo`` made it all, and inside a unit writers write at once): the
        generation moves, and a deferred value would be lost to a holder reading back."""
        if self.deferred:
            raise RuntimeError("a write deferred inside an undoable unit (a bug in eosflow)")
        for writes, key, old in reversed(undo):
            if old is MISSING:
                writes.pop(key, None)
            else:
                writes[key] = old
        self.generation += 1
