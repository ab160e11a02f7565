"""Compiled hot paths: the per-record steps of decoding fetched records, producing outputs,
sizing polls and a store's point reads and writes, in C.

What is here runs once per record of every app, and in Python each of those steps costs
more in the interpreter than in the work: reading an ``Output``'s six fields, building
its partition's dict key, the call into aiokafka's C record builder. ``_hot`` (Cython,
built when eosflow is installed) does the same steps reading the fields at their slots'
offsets and calling the builder directly. Measured path alone on this machine (200,000
outputs of one topic, 3 partitions, aiokafka's C builder, best of 7): 124 ns an output
given its partition (the copy's) against 242 in Python; 144 ns one partitioned by its
key (murmur2 in C, no cache needed) against 343; a poll's byte count 7 ns a record
against 38. Before this room, ``send_all``'s own loop took ~236 and ~300 ns
(``benchmarks/README.md``).

- ``fill``: appends a run of outputs to their partitions' open batches until one needs
  the caller (a partition without an open batch, a full batch, a topic without metadata,
  anything to be named in an error), or raises ``Oversize`` for an output that can never
  be produced; ``_aiokafka``'s ``send_all`` does the rest;
- ``murmur2``: Kafka's default partitioner's hash;
- ``byte_count``: key + value bytes of records (``Sizing``);
- ``decode_batch``: an uncompressed v2 record batch of a fetch answer straight into
  ``Record``s (``_aiokafka``'s fetch; the Python version is much slower than aiokafka's
  own decoder, so without the extension the fetch keeps aiokafka's).

The state's paths are a second module, ``_stores`` (built with ``_hot``):

- ``bind_store``: a store's point reads and writes (``Store``'s ``raw``, ``get``,
  ``put``, ``_set``), the layers' dicts read in C and a JSON integer read and written
  in C, put in place of the Python methods by ``eosflow._state``; their reference is
  those methods (``_reference.bind_store`` leaves them; ``tests/unit/test_native_store.py``
  holds the compiled ones to them), and a store or layers of another class than the
  ones bound takes them.
- ``bind_table``: ``TableStore.get`` (a join's per-record read), the store's read
  path with the view's own slots; views over layers of another class take the Python
  method;
- ``bind_window``: ``WindowStore.advance`` and a tumbling window's ``update`` on their
  hot paths (outside an undoable unit; for ``update``, the record's window the one the
  last update wrote): the stream time and the value held for the deferred write; any
  other case takes the Python method, which then does all of it;
- ``bind_reader``: the read cache's ``Reader.get`` (a read the layers did not answer),
  the newer generation's dict read in C; the older generation and a miss go through
  the cache's methods;
- ``bind_seat``: ``Processor.state``, ``window`` and ``table`` where the app's seat
  (its context variable) is made for the processor -- or for the pipeline whose stage
  it is, and the name is one the stage declares -- and holds the handle by name, in C;
  any other call takes the Python method, whose first step is that lookup.

The engine's per-record loop is a third, ``_drive`` (reference: ``_drive_py``):

- ``drive``: records through ``process`` while each coroutine finishes without
  suspending, sent into from C, and gives an ``Output`` of bytes or None; everything
  else -- a suspension, a raise, a result to check, time to yield or to stop -- goes
  back to ``Engine._process``, which finishes a suspended coroutine with ``resumed``.
  Path alone (a processor returning its record as an ``Output``, 1,000,000 records):
  ~285 ns a record against ~500 for the engine's loop in Python;
- ``mark_runs``: each partition run's next offset, one pass after the loop.

**Failure mode and fallback.** The extensions are optional at install: without a C
compiler (or from a source tree not installed) ``_reference``, the same steps in Python,
runs instead -- about as fast as ``send_all``'s loop was before this room (within ~15%,
the figures above). ``COMPILED`` says which (True: the three modules were built); eosflow's
own tests fail when it is False
(``tests/unit/test_native.py``), and hold each compiled function to its reference over
random inputs. Reading slots by offset
relies on ``Output`` and ``Record`` being msgspec structs and the adapter's batch a
``__slots__`` class: ``_hot`` checks at import and at ``bind_batch`` that each field is
a slot holding an object (else ``TypeError``), and ``fill`` checks the exact type of
each output and batch, leaving any other to the caller. Every object it passes to the
builder is held for the call, and the list's length is read again for each output (the
Python an output's headers run could change it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._drive_py import AWAIT, END, RAISED, RESULT, STOP, UNSTARTED, YIELD, resumed
from ._reference import Corrupt, Oversize

try:
    from ._drive import drive, mark_runs
    from ._hot import bind_batch, byte_count, decode_batch, fill, murmur2
    from ._stores import bind_reader, bind_seat, bind_store, bind_table, bind_window

    COMPILED = True
except ImportError:  # not built: the same steps in Python
    from ._drive_py import drive, mark_runs
    from ._reference import (
        bind_batch,
        bind_reader,
        bind_seat,
        bind_store,
        bind_table,
        bind_window,
        byte_count,
        decode_batch,
        fill,
        murmur2,
    )

    COMPILED = False


def named_as(compiled: Callable[..., Any], python: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` under ``python``'s name, qualified name and docstring, so that
    ``help()``, an IDE and an error about its arguments name the method it replaces."""
    for attr in ("__name__", "__qualname__", "__doc__"):
        setattr(compiled, attr, getattr(python, attr))
    return compiled


__all__ = [
    "AWAIT",
    "COMPILED",
    "END",
    "RAISED",
    "RESULT",
    "STOP",
    "UNSTARTED",
    "YIELD",
    "Corrupt",
    "Oversize",
    "bind_batch",
    "bind_reader",
    "bind_seat",
    "bind_store",
    "bind_table",
    "bind_window",
    "byte_count",
    "decode_batch",
    "drive",
    "fill",
    "mark_runs",
    "murmur2",
    "named_as",
    "resumed",
]
