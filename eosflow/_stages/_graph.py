"""A pipeline's declaration and its checked graph.

A ``Pipeline`` names its stages (``stages``: name -> ``Stage``). A stage is a
``Processor`` and what it reads: source topics, or the names of earlier stages -- a
stage's name stands for its **repartition topic**, ``<group>--<stage>--repartition``,
which holds what the stage regroups (``Regroup``: a new key, and the input record's
timestamp, so event time carries across). A stage read by two is a branch; a stage
reading two is a merge. The graph is checked once, in one line per mistake, before
anything connects (``plan``): a stage without inputs, a name that is no legal topic
part or is used twice, a cycle, a store, window or table name two stages declare, and
what this version does not run (two stages of one topic that both keep timers or read
their own event time; beside a ``process_batch`` stage, a stage that keeps state,
``_check_batches``). A topic two stages declare differently is refused when the app is
built (``_run.staged``).

The trade-off of one transaction for every stage: the whole app commits as one unit --
a record regrouped, the regrouped record's effects downstream and every consumed
offset, exactly once -- so a slow stage slows every stage of the instance, and the
stages scale together (one group, one deployment).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigError
from .._processor import Lifecycle, Processor, overrides_batch
from .._records import Regroup
from .._state import batch_ready, copartitioned, overrides

__all__ = ["Pipeline", "Plan", "Regroup", "Stage", "plan", "repartition_topic"]

_LEGAL = re.compile(r"^[A-Za-z0-9._-]+$")
_MAX_TOPIC = 249


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage of a ``Pipeline``: ``processor`` runs on every record of ``inputs``
    (source topics, or earlier stages' names: their regrouped records). ``partitions``:
    of this stage's repartition topic, if a later stage reads it (None: as many as the
    most partitioned of ``inputs``)."""

    processor: Processor
    inputs: tuple[str, ...]
    partitions: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.inputs, str):  # Stage(p, inputs="orders"): one input
            object.__setattr__(self, "inputs", (self.inputs,))


class Pipeline(Lifecycle):
    """An app of several stages, run as one: every stage's outputs, regrouped records
    and consumed offsets commit in one Kafka transaction per instance. Subclass it and
    set ``stages`` (a class attribute or, from settings, in ``__init__``)::

        class Revenue(eosflow.Pipeline):
            stages = {
                "by-product": eosflow.Stage(ByProduct(), inputs=("orders",)),
                "count": eosflow.Stage(CountPerProduct(), inputs=("by-product",)),
            }

    Its hooks (``configure``, ``on_start``, ...) are called, then each stage's."""

    stages: Mapping[str, Stage] = {}


@dataclass(frozen=True)
class Plan:
    """A pipeline's checked graph under one group: its stages in an order where each
    comes after what it reads, the source topics, each read stage's repartition topic."""

    name: str
    order: tuple[str, ...]
    stages: Mapping[str, Stage]
    sources: tuple[str, ...]
    repartition: Mapping[str, str]  # a stage read by another -> its topic
    readers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # topic -> stages

    def topic_of(self, name: str) -> str:
        """An input's topic: a stage's repartition topic, or the source topic itself."""
        return self.repartition.get(name, name)

    def inputs(self) -> dict[str, tuple[str, ...]]:
        """Each stage, in order, with the topics it reads."""
        return {n: tuple(self.topic_of(i) for i in self.stages[n].inputs) for n in self.order}

    def describe(self) -> str:
        """The stages and their topics, one line each (``eosflow topology``)."""
        lines = [
            f"pipeline {self.name}: {len(self.order)} stages, sources {', '.join(self.sources)}"
        ]
        for name in self.order:
            stage = self.stages[name]
            reads = ", ".join(
                f"{i} (stage, {self.repartition[i]})" if i in self.repartition else i
                for i in stage.inputs
            )
            line = f"  {name}: {type(stage.processor).__name__} <- {reads}"
            if name in self.repartition:
                parts = "" if stage.partitions is None else f", {stage.partitions} partitions"
                readers = [s for s in self.order if name in self.stages[s].inputs]
                line += f"; regroups to {self.repartition[name]}{parts} -> {', '.join(readers)}"
            lines.append(line)
        return "\n".join(lines)


def repartition_topic(group_id: str, stage: str) -> str:
    """``<group>--<stage>--repartition`` (the changelogs' ``--`` style)."""
    return f"{group_id}--{stage}--repartition"


def plan(pipeline: Pipeline, group_id: str) -> Plan:
    """``pipeline``'s graph under ``group_id``, checked (the module's doc): a one-line
    ``ConfigError`` naming the mistake otherwise."""
    kind = type(pipeline).__name__
    stages = pipeline.stages
    if not isinstance(stages, Mapping) or not stages:
        raise ConfigError(
            f"{kind}.stages must map stage names to eosflow.Stage, e.g. "
            "{'count': eosflow.Stage(Count(), inputs=('orders',))}"
        )
    seen_processors: dict[int, str] = {}
    for name, stage in stages.items():
        _check_stage(kind, name, stage, group_id)
        other = seen_processors.setdefault(id(stage.processor), name)
        if other != name:
            raise ConfigError(
                f"{kind}: stages {other!r} and {name!r} share one processor object; "
                "give each stage its own"
            )
    order = _ordered(kind, stages)
    read = {i for s in stages.values() for i in s.inputs}
    repartition = {n: repartition_topic(group_id, n) for n in order if n in read}
    sources = tuple(dict.fromkeys(i for n in order for i in stages[n].inputs if i not in stages))
    readers: dict[str, list[str]] = {}
    for n in order:
        for i in stages[n].inputs:
            readers.setdefault(repartition.get(i, i), []).append(n)
    _check_names(kind, stages)
    _check_batches(kind, stages)
    return Plan(
        kind,
        order,
        dict(stages),
        sources,
        repartition,
        {t: tuple(s) for t, s in readers.items()},
    )


def _check_stage(kind: str, name: object, stage: object, group_id: str) -> None:
    if not isinstance(name, str) or not _LEGAL.match(name) or "--" in name:
        raise ConfigError(
            f"{kind}.stages: stage name {name!r}: use letters, digits, '.', '_' and single "
            "'-' (it names the stage's repartition topic)"
        )
    if not isinstance(stage, Stage):
        raise ConfigError(f"{kind}.stages[{name!r}]: expected an eosflow.Stage, not {stage!r}")
    where = f"{kind}.stages[{name!r}]"
    if not isinstance(stage.processor, Processor):
        raise ConfigError(f"{where}: expected an eosflow.Processor, not {stage.processor!r}")
    if (
        not isinstance(stage.inputs, tuple | list)
        or not stage.inputs
        or not all(isinstance(i, str) and i for i in stage.inputs)
    ):
        raise ConfigError(f"{where} reads nothing: give inputs=(topic or stage name, ...)")
    if len(set(stage.inputs)) != len(stage.inputs):
        raise ConfigError(f"{where} names an input twice: {stage.inputs}")
    if stage.partitions is not None and (type(stage.partitions) is not int or stage.partitions < 1):
        raise ConfigError(f"{where}: partitions must be a positive int, not {stage.partitions!r}")
    topic = repartition_topic(group_id, name)
    if len(topic) > _MAX_TOPIC or not _LEGAL.match(topic):
        raise ConfigError(
            f"{where}: the repartition topic {topic[:40]}... is no legal Kafka topic "
            "name: shorten the group id or the stage name"
        )
    copartitioned(stage.processor)  # True or False, or one line


def _ordered(kind: str, stages: Mapping[str, Stage]) -> tuple[str, ...]:
    """The stages with every stage after those it reads; a cycle is a ``ConfigError``
    naming it."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1: being visited, 2: placed

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = [*path[path.index(name) :], name]
            raise ConfigError(f"{kind}.stages has a cycle: {' -> '.join(cycle)}")
        state[name] = 1
        for i in stages[name].inputs:
            if i in stages:
                visit(i, [*path, name])
        state[name] = 2
        order.append(name)

    for name in stages:
        visit(name, [])
    return tuple(order)


def _check_names(kind: str, stages: Mapping[str, Stage]) -> None:
    """A store or window name is one store of one stage; a topic declared by two stages
    is declared alike; two stages of one topic cannot both keep timers or own time."""
    owner: dict[str, str] = {}
    for name, stage in stages.items():
        p: Any = stage.processor
        for store in [
            *(getattr(p, "stores", None) or {}),
            *(getattr(p, "windows", None) or {}),
            *(getattr(p, "tables", None) or {}),
        ]:
            other = owner.setdefault(store, name)
            if other != name:
                raise ConfigError(
                    f"{kind}: stages {other!r} and {name!r} both declare the store, window "
                    f"or table {store!r}: a name is one stage's (rename one)"
                )
    for what, method in (
        ("keep timers (fire)", "fire"),
        ("read their own event time", "timestamp"),
    ):
        by_input: dict[str, str] = {}
        for name, stage in stages.items():
            if overrides(stage.processor, method):
                for i in stage.inputs:
                    other = by_input.setdefault(i, name)
                    if other != name:
                        raise ConfigError(
                            f"{kind}: stages {other!r} and {name!r} both read {i!r} and "
                            f"{what}: at most one stage of an input may"
                        )


def _check_batches(kind: str, stages: Mapping[str, Stage]) -> None:
    """A stage overriding ``process_batch`` makes every transaction one batch, so each
    other stage is called per record without a record's state bound: those stages keep
    none. A batch stage keeps what a batch can (``batch_ready``)."""
    batches = [n for n, s in stages.items() if overrides_batch(s.processor)]
    if not batches:
        return
    for name, stage in stages.items():
        p: Any = stage.processor
        if name in batches:
            batch_ready(p, True)
            continue
        kept = [
            what
            for what, present in (
                ("stores", bool(getattr(p, "stores", None))),
                ("windows", bool(getattr(p, "windows", None))),
                ("timers (fire)", overrides(p, "fire")),
                ("tables", bool(getattr(p, "tables", None))),
                ("copartitioned inputs", getattr(p, "copartitioned", False) is True),
            )
            if present
        ]
        if kept:
            raise ConfigError(
                f"{kind}: stage {name!r} keeps {kept[0]} beside the process_batch stage "
                f"{batches[0]!r}: with a batch stage every stage runs once per transaction, "
                "and only a batch stage keeps state (self.batch); move it there"
            )
