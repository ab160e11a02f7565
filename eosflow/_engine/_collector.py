"""Python's garbage collector while an app runs.

Every record allocates a few container objects (its ``Record``, the processor's
``Output``, a coroutine), and a transaction holds up to 20,000 of each until it ends.
CPython runs a first-generation collection every 700 net allocations by default, and
each one walks the young objects, live ones included: on a pass-through of 1,000,000
records on genuine Kafka that was ~0.6 s of ~3.0 s of CPU. ``collecting`` raises that
threshold while an app runs (``EosConfig.gc_threshold``, 20,000 by default; measured:
310-316k rec/s at 700, 357-373k at 10,000, 387-394k at 20,000, 386-403k at 50,000, peak
RSS 70-72 MiB in every case, three alternating runs each) and puts the interpreter's
own back when the last app in the process stops, so an embedding program keeps its
settings afterwards. The older generations' thresholds are left as they are. ``None``
leaves the collector alone.

The trade-off: garbage in reference cycles lives longer between collections (up to the
threshold's count of young objects). Nothing eosflow keeps depends on when the collector
runs.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_apps = 0  # apps running in this process under a raised threshold
_saved: tuple[int, int, int] | None = None  # the interpreter's thresholds before the first


@contextlib.contextmanager
def collecting(threshold: int | None) -> Iterator[None]:
    """Run the block with the first-generation threshold at ``threshold`` (the highest
    asked by the apps running); the thresholds from before the first app are restored
    when the last one leaves, in whatever order they leave."""
    global _apps, _saved
    if threshold is None:
        yield
        return
    if _apps == 0:
        _saved = gc.get_threshold()
    _apps += 1
    first, *older = gc.get_threshold()
    gc.set_threshold(max(first, threshold) if _apps > 1 else threshold, *older)
    try:
        yield
    finally:
        _apps -= 1
        if _apps == 0 and _saved is not None:
            gc.set_threshold(*_saved)
            _saved = None
