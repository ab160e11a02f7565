"""How many partitions each repartition topic gets (``sized``).

A regrouping stage's repartition topic has ``Stage.partitions`` when set. Otherwise:

- read by a **co-partitioned stage** (one with tables, or ``copartitioned``: its topics
  are a group of ``Staged.tasks``), it takes the partition count of the group's first
  topic whose count is given -- a source, a table, or a repartition topic whose stage
  sets ``partitions`` -- so that partition p of each is one task. With none given (every
  input regrouped), the group's free topics all take the largest of their own defaults.
  Kafka Streams sizes the repartition topics of a join the same way;
- otherwise, as many partitions as the stage's most partitioned input.

Counts that still differ in a group (two sources of different counts, say) are refused
at start by the state room's ``check_partitions``, in one line.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._graph import Plan

__all__ = ["sized"]


def sized(
    graph: Plan, tasks: tuple[frozenset[str], ...], known: Mapping[str, int]
) -> dict[str, int]:
    """Each repartition topic's partition count; ``known``: the sources' and the tables'
    counts, ``tasks``: the groups of topics taken together."""
    stage_of = {topic: name for name, topic in graph.repartition.items()}
    free = {t for t, n in stage_of.items() if graph.stages[n].partitions is None}
    pins: dict[str, int] = {}
    unpinned: list[frozenset[str]] = []
    for task in tasks:
        given = [
            known[t] if t not in stage_of else graph.stages[stage_of[t]].partitions
            for t in sorted(task)
            if t not in free
        ]
        counts = [n for n in given if n is not None]
        if counts:
            pins.update(dict.fromkeys(task & free, counts[0]))
        else:
            unpinned.append(task & free)
    first = _in_order(graph, known, pins)
    for task in unpinned:  # every input regrouped: the largest of their defaults
        if task:
            pins.update(dict.fromkeys(task, max(first[t] for t in task)))
    return _in_order(graph, known, pins)


def _in_order(graph: Plan, known: Mapping[str, int], pins: Mapping[str, int]) -> dict[str, int]:
    counts = dict(known)
    out: dict[str, int] = {}
    for name in graph.order:
        stage = graph.stages[name]
        topic = graph.repartition.get(name)
        if topic is None:
            continue
        n = (
            stage.partitions
            or pins.get(topic)
            or max(counts[graph.topic_of(i)] for i in stage.inputs)
        )
        counts[topic] = out[topic] = n
    return out
