"""The seat: what a running app gives the processor it runs, kept in an object of its
own -- never written into the user's instance.

A ``Processor`` reaches its runtime through one seam, ``seat_of(self)``: the ``Seat``
of the app running it, found in a context variable that ``EosApp.run`` sets for its
whole run (``seated``) and that every task and ``asyncio.to_thread`` call started
inside the run inherits. The seat holds the processor it was made for, so another
processor's methods called from inside the run find nothing (a seat is not shared by
accident), and two apps in one event loop -- each run in a task of its own -- each see
their own.

What the runtime keeps there, and who writes it:

- ``observer``: the app's observers (``EosApp``), for ``Processor.observer``;
- ``stores``: the stores of the record in process (``_state.Stores``, set when the
  engine binds ``process``), for ``state()``, ``window()``, ``session()``,
  ``sliding()``, ``table()``, ``state_of()`` and ``timers``;
- ``windows`` and ``tables``: the record's tumbling and hopping windows and the tables
  of its partition number, set around each ``process`` (the per-record path: one
  attribute write, as when they lived on the processor);
- ``batch``: the ``BatchState`` of the ``process_batch`` call in progress;
- ``members``: a pipeline's stage processors (``_stages``), which the seat serves as it
  serves ``processor`` (each stage's stores are its own by name: ``reach``, a member's
  id -> the names of the stores, windows and tables it declares);
- ``scope``: a pipeline's (``_stages``): per consumed topic, the stores, windows and
  timers kept on its partitions -- those of the stages reading it. None: every one on
  every partition (set before the stores are bound);
- ``tasks``: a pipeline's (``_stages``): the groups of topics whose partition p make one
  task of a co-partitioned stage -- its inputs and its tables' topics -- each topic in
  at most one. None: every input and table topic in one group (an app of one
  processor). Set before the stores are bound;
- ``aliases``: a pipeline's (``_stages``): a stage's name -> its repartition topic, the
  names a stage may give its inputs where eosflow resolves them (``topics``
  declarations, ``state_of``). Empty for an app of one processor;
- ``route``: a pipeline's (``_stages``): what the engine does first with a result
  that is neither an ``Output`` nor None -- a stage's ``Regroup`` made an ``Output`` to
  its repartition topic (``Staged.route``). None for an app of one processor. Set
  before the engine is built.

The trade-off: a context variable costs one ``get`` per call of those methods (tens of
nanoseconds) and is not seen by a thread started with ``loop.run_in_executor`` (which,
unlike ``asyncio.to_thread``, does not copy the context); the gain is a user's object
with nothing of eosflow's written into it, whatever its own attribute names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

from .._observe import Observer

__all__ = ["CURRENT", "NOTHING", "Seat", "seat_of", "seated"]

#: what ``windows`` and ``tables`` hold outside ``process``
NOTHING: Mapping[str, Any] = MappingProxyType({})


class Seat:
    """What the runtime gives ``processor`` while an app runs it (the module's doc)."""

    __slots__ = (
        "aliases",
        "batch",
        "member_ids",
        "members",
        "observer",
        "processor",
        "reach",
        "route",
        "scope",
        "stores",
        "tables",
        "tasks",
        "windows",
    )

    def __init__(
        self, processor: object, observer: Observer, members: tuple[object, ...] = ()
    ) -> None:
        self.processor = processor
        self.members = members  # held: their ids stay theirs while the seat lives
        self.member_ids = frozenset(id(m) for m in members)  # one lookup per state() call
        self.reach = {  # a member's id -> what it may name (read when the app is built)
            id(m): frozenset(
                n for kind in ("stores", "windows", "tables") for n in getattr(m, kind, None) or ()
            )
            for m in members
        }
        self.observer = observer
        self.scope: Mapping[str, frozenset[str]] | None = None  # topic -> names kept there
        self.tasks: tuple[frozenset[str], ...] | None = None  # topics taken together
        self.aliases: Mapping[str, str] = NOTHING  # a stage's name -> its topic
        self.route: Callable[[object], object] | None = None  # a pipeline's results
        self.stores: Any = None  # _state.Stores, once bound
        self.batch: Any = None  # _state.BatchState, during process_batch
        self.windows: Mapping[str, Any] = NOTHING
        self.tables: Mapping[str, Any] = NOTHING


#: the running app's seat (``seat_of`` reads it; a hot path may read it inline)
CURRENT: ContextVar[Seat | None] = ContextVar("eosflow_seat", default=None)


def seat_of(processor: object) -> Seat | None:
    """The seat of the app running ``processor`` in this context, or None (not running,
    or running in another app)."""
    seat = CURRENT.get()
    if seat is None:
        return None
    if seat.processor is processor or id(processor) in seat.member_ids:
        return seat
    return None


@contextmanager
def seated(seat: Seat) -> Iterator[Seat]:
    """``seat`` is the current one inside the block (and in the tasks started there)."""
    token = CURRENT.set(seat)
    try:
        yield seat
    finally:
        CURRENT.reset(token)
