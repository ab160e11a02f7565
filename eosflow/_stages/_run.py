"""A pipeline as the one processor the engine runs (``staged``).

``staged(pipeline, config)`` checks the graph (``_graph.plan``) and gives back what
``EosApp`` runs instead of the user's ``Pipeline``: an eosflow-owned ``Processor``
(``Staged``) and the config subscribing to every source and repartition topic. The
user's objects are only read and called, never written into.

Per record, ``Staged.process`` calls the stages that read the record's topic, in the
graph's order, and each ``Regroup`` becomes an ``Output`` to the stage's repartition
topic with the record's timestamp. A topic one stage reads -- the per-record path of
every pipeline -- has its stage's coroutine handed to the engine as it is, with no frame
of ours around it (a frame cost ~8% of a regroup's CPU), and the engine routes what it
returns (``Staged.route``, the seat's ``route``) before anything else runs.

Everything the stages return goes into the one open transaction, with every consumed
offset: a regrouped record and the offset of the record it came from commit together or
not at all, and the stages after it read it only once committed (the consumer reads
read_committed).

A stage overriding ``process_batch`` (a ``SparkProcessor``) makes the pipeline a batch
app (``routed_batch``): each transaction's records are handed over once, each stage
getting its topics' records -- a batch stage in one call with ``self.batch`` narrowed to
them, a record stage (which keeps no state then: ``_graph``) one call per record.

Stores and windows are the stages' by name (a name is one stage's: ``_graph``; a stage
naming another's fails its record, ``Processor.state``); the runtime keeps them per
consumed topic partition, so a later stage's stores are keyed by the partitions of the
repartition topic it reads -- by the new key. A window's ``closed`` goes to the stage
that declared the window, a timer's ``fire`` and a record's ``timestamp`` to the one
stage of the topic that overrides them.

Each consumed topic's partitions keep only the stores, windows and timers of the stages
reading it (``scope``, which ``EosApp`` puts in the seat): a store has a changelog per
topic its stage reads, and a transaction writes position records only for those. In a
pipeline with state, a topic whose stages keep none keeps ``WITNESS`` instead, position
records only: its restore checks the committed offset fetched on assignment, as every
stateful partition's does (``_state._restore``), so a stale answer (a group coordinator
answering from an old cache) does not have records regrouped twice.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import _aiokafka as ak
from .._config import EosConfig
from .._errors import ConfigError
from .._processor import Processor, ProcessResult, overrides_batch
from .._records import Output, Record
from .._state import BYTES, Table, Timer, Window, copartitioned, declared, overrides, seat_of
from ._graph import Pipeline, Plan, Regroup, Stage, plan
from ._sizing import sized
from ._trim import Trimmer

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

__all__ = ["Staged", "staged"]

log = logging.getLogger("eosflow.stages")

#: the store a stateless stage's topic keeps in a pipeline with state: position records
#: only, the restore's witness of the offsets committed there (``Staged._witness``)
WITNESS = "__positions"

#: a repartition topic's settings: never compacted (a compacted one would keep only the
#: last record of each key), never deleted by time (a stage far behind would lose
#: records): what every stage committed past is deleted by the ``Trimmer`` instead
REPARTITION_CONFIGS = (
    ("cleanup.policy", "delete"),
    ("retention.ms", "-1"),
    ("message.timestamp.type", "CreateTime"),
)


def staged(pipeline: Pipeline, config: EosConfig) -> tuple[Staged, EosConfig]:
    """What ``EosApp`` runs for ``pipeline``: the processor and the config (every source
    and repartition topic subscribed). A topic of ``config.input_topics`` no stage reads
    is a one-line ``ConfigError``."""
    graph = plan(pipeline, config.group_id)
    if config.auto_offset_reset != "earliest":
        raise ConfigError(
            f"{graph.name}: auto_offset_reset={config.auto_offset_reset} would skip "
            "regrouped records a repartition partition holds before its first commit; a "
            "pipeline reads from the earliest offset (set auto_offset_reset=earliest)"
        )
    unread = [t for t in config.input_topics if t not in graph.sources]
    if unread:
        raise ConfigError(
            f"{graph.name}: input topic {unread[0]!r} is read by no stage "
            f"(its sources: {', '.join(graph.sources)})"
        )
    inputs = (*graph.sources, *graph.repartition.values())
    methods: dict[str, Any] = {}
    if any(overrides(s.processor, "fire") for s in graph.stages.values()):
        methods["fire"] = Staged.routed_fire
    if any(overrides(s.processor, "timestamp") for s in graph.stages.values()):
        methods["timestamp"] = Staged.routed_timestamp
    if any(overrides_batch(s.processor) for s in graph.stages.values()):
        methods["process_batch"] = Staged.routed_batch  # the engine's batch strategy
    # the runtime tells timers and own event time by whether these are overridden: the
    # class has them only when a stage does
    cls = type(graph.name, (Staged,), {"__module__": __name__, **methods})
    runner: Staged = cls(pipeline, graph, config.transaction_timeout_s)
    return runner, config.model_copy(update={"input_topics": inputs})


class Staged(Processor):
    """The stages of one pipeline as one processor (the module's doc)."""

    def __init__(self, pipeline: Pipeline, graph: Plan, timeout_s: float) -> None:
        self.pipeline = pipeline
        self.graph = graph
        # what every stage committed past, deleted from the repartition topics
        self.trimmer = Trimmer(graph.repartition.values(), timeout_s)
        stages = graph.stages
        self.members = tuple(stages[n].processor for n in graph.order)
        # per consumed topic: (stage name, its processor) in the graph's order
        self._readers = {
            topic: tuple((n, stages[n].processor) for n in names)
            for topic, names in graph.readers.items()
        }
        self._regroups_to = dict(graph.repartition)
        # a topic one stage reads: that stage's name and bound ``process`` (``process``);
        # the record last handed on, whose stage ``route`` names
        one = {topic: readers[0] for topic, readers in self._readers.items() if len(readers) == 1}
        self._stage_of = {topic: name for topic, (name, _p) in one.items()}
        self._one = {topic: processor.process for topic, (_n, processor) in one.items()}
        self._record: Record | None = None
        # per stage, in the graph's order: its processor, the topics it reads, whether
        # it takes a batch (``routed_batch``)
        self._batches = tuple(
            (
                n,
                stages[n].processor,
                frozenset(graph.inputs()[n]),
                overrides_batch(stages[n].processor),
            )
            for n in graph.order
        )
        # the stages' declarations, merged (names checked unique by ``plan``)
        self.stores = {k: v for n in graph.order for k, v in _attr(stages[n], "stores").items()}
        self.windows = {k: v for n in graph.order for k, v in _attr(stages[n], "windows").items()}
        self.tables = {k: v for n in graph.order for k, v in _attr(stages[n], "tables").items()}
        # per stage with tables or co-partitioned inputs: its inputs and its tables'
        # topics, partition p of each taken together (``Seat.tasks``); the app's sync
        # and range assignment are on when any stage has them
        self.copartitioned = any(copartitioned(s.processor) for s in stages.values())
        self.tasks = _tasks(graph) if self.tables or self.copartitioned else None
        self._closed_by = {  # window -> (its stage, the stage's processor)
            w: (n, stages[n].processor) for n in graph.order for w in _attr(stages[n], "windows")
        }
        # per consumed topic, what its partitions keep: the stores, windows and timers
        # of the stages reading it (``Seat.scope``; the engine's stores keep no other)
        self._declared = {n: frozenset(declared(stages[n].processor)) for n in graph.order}
        self.scope = {
            topic: frozenset().union(*(self._declared[n] for n, _p in readers))
            for topic, readers in self._readers.items()
        }
        self._witness()
        self.topics = _topics(graph)
        self.schema_registry = _registry(graph)
        self._timed: dict[str, dict[str, tuple[str, Processor]]] = {
            # topic -> (the stage keeping its timers / event time, its processor)
            method: {
                graph.topic_of(i): (n, stages[n].processor)
                for n in graph.order
                if overrides(stages[n].processor, method)
                for i in stages[n].inputs
            }
            for method in ("fire", "timestamp")
        }
        self._stamps = self._timed["timestamp"]  # empty: event time is the Kafka time

    def _witness(self) -> None:
        """In a pipeline with state, a topic whose stages keep none keeps ``WITNESS``: a
        store never written but for its position records, so that the restore of its
        partitions still checks the committed offset fetched on assignment against the
        last one committed (a stale answer would have its records regrouped twice)."""
        bare = [topic for topic, names in self.scope.items() if not names]
        if not bare or not (any(self.scope.values()) or self.tables):
            return  # every topic keeps state, or none does (a stateless app's rules)
        if WITNESS in self.stores or WITNESS in self.windows:
            raise ConfigError(f"{self.graph.name}: the store name {WITNESS!r} is eosflow's")
        self.stores = {**self.stores, WITNESS: BYTES}
        for topic in bare:
            self.scope[topic] = frozenset({WITNESS})

    # --- records ------------------------------------------------------------------------

    def process(self, record: Record[Any, Any]) -> Coroutine[Any, Any, ProcessResult]:
        """The coroutine of the one stage reading ``record``'s topic, handed back without
        a frame of ours around it (the per-record path of every pipeline): the engine
        routes what it returns (``route``, the seat's). A topic several stages read (a
        branch) takes ``_several``, which routes each stage's result itself."""
        process = self._one.get(record.topic)
        if process is not None:
            self._record = record  # whose stage ``route`` names: the engine's next result
            return process(record)  # type: ignore[no-any-return]
        self._record = None
        return self._several(record)

    def route(self, result: object) -> ProcessResult:
        """``result`` of the record ``process`` last handed on, each ``Regroup`` an
        ``Output`` to its stage's repartition topic with the record's event time. The
        engine calls it (``Seat.route``) before anything else can run, and so before
        ``process`` is called again; the rest goes back as it is, for the engine to
        check. Routing is idempotent: outputs stay as they are, so a result routed
        already (a branch's, a timer's, a final's) passes through unchanged."""
        record = self._record
        if record is None or result is None or type(result) is Output:
            return result  # type: ignore[return-value]  # the engine names what it is
        name = self._stage_of[record.topic]
        # a regrouped record carries the event time its stage read (``timestamp``)
        when = record.timestamp if not self._stamps else self.routed_timestamp(record)
        if type(result) is Regroup:
            return self._regrouped(name, result, when)
        return self._routed(name, result, when)

    async def _several(self, record: Record[Any, Any]) -> ProcessResult:
        when = self.routed_timestamp(record)
        out: list[object] = []
        for name, processor in self._readers.get(record.topic, ()):
            result = self._routed(name, await processor.process(record), when)
            if isinstance(result, Output):
                out.append(result)
            elif isinstance(result, list):
                out.extend(result)
            elif result is not None:
                return result  # not outputs: the engine names what it is
        return out  # type: ignore[return-value]  # outputs, or what the engine names

    async def routed_batch(self, records: Sequence[Record]) -> list[Output]:
        """A pipeline with a ``process_batch`` stage runs each transaction as one batch:
        every stage, in the graph's order, gets the records of the topics it reads -- a
        batch stage in one ``process_batch`` call, its ``self.batch`` narrowed to them
        (``BatchState.narrowed``), a record stage (stateless: ``_graph``) one ``process``
        call each. A batch stage's ``Regroup`` carries the latest event time of its
        records, unless it gives its own (``Regroup.timestamp``)."""
        seat = seat_of(self)
        state = None if seat is None else seat.batch  # with stores or windows declared
        out: list[Output] = []
        for name, processor, topics, batch in self._batches:
            indices = [i for i, r in enumerate(records) if r.topic in topics]
            if not indices:
                continue
            if not batch:
                for i in indices:
                    r = records[i]
                    result = await processor.process(r)
                    out.extend(_flat(name, self._routed(name, result, self.routed_timestamp(r))))
                continue
            mine = [records[i] for i in indices]
            if seat is not None and state is not None:  # its own names, its records
                seat.batch = state.narrowed(indices, self._declared[name])
            try:
                result = await processor.process_batch(mine)
            finally:
                if seat is not None:
                    seat.batch = state
            if isinstance(result, Iterable) and not isinstance(result, str | bytes | dict):
                result = list(result)  # read twice: for Regroups, then routed
            when = max(self.routed_timestamp(r) for r in mine) if _regroups(result) else None
            out.extend(_flat(name, self._routed(name, result, when)))
        return out

    async def closed(self, key: bytes, window: Window, value: Any) -> ProcessResult:
        stage, processor = self._closed_by[window.store]
        # a final regrouped carries the window's last millisecond as its event time
        return self._routed(stage, await processor.closed(key, window, value), window.end_ms - 1)

    async def routed_fire(self, timer: Timer) -> ProcessResult:
        topic = self._current_topic()
        timed = None if topic is None else self._timed["fire"].get(topic)
        if timed is None:  # set by a stage that does not override fire
            raise TypeError(
                f"a timer of {topic} fired, but no stage reading it overrides fire: "
                "override fire in the stage that sets timers"
            )
        stage, processor = timed
        when = timer.time_ms if not timer.wall_clock else None
        return self._routed(stage, await processor.fire(timer), when)

    def routed_timestamp(self, record: Record) -> int:
        timed = self._stamps.get(record.topic)
        return record.timestamp if timed is None else timed[1].timestamp(record)

    def _routed(self, stage: str, result: object, timestamp: int | None) -> ProcessResult:
        """``result`` with each ``Regroup`` as an ``Output`` to ``stage``'s repartition
        topic (the rest as it is: the engine checks it)."""
        if result is None or isinstance(result, Output):
            return result
        if isinstance(result, Regroup):
            return self._regrouped(stage, result, timestamp)
        if isinstance(result, (str, bytes, bytearray, dict)) or not isinstance(result, Iterable):
            return result  # type: ignore[return-value]  # the engine names what it is
        return [  # a list, whatever iterable the stage gave
            self._regrouped(stage, r, timestamp) if isinstance(r, Regroup) else r for r in result
        ]

    def _regrouped(self, stage: str, r: Regroup, timestamp: int | None) -> Output:
        topic = self._regroups_to.get(stage)
        if topic is None:
            raise TypeError(
                f"stage {stage!r} returned a Regroup, but no stage reads {stage!r}: "
                f"name it among a later stage's inputs"
            )
        if r.key is None:
            raise TypeError(f"stage {stage!r} returned a Regroup without a key")
        when = timestamp if r.timestamp is None else r.timestamp
        return Output(topic, r.value, key=r.key, headers=r.headers, timestamp=when)

    def _current_topic(self) -> str | None:
        seat = seat_of(self)
        current = None if seat is None or seat.stores is None else seat.stores.current
        return None if current is None else str(current[0])

    # --- topics ---------------------------------------------------------------------------

    async def ensure_topics(
        self, producer: AIOKafkaProducer, replication: int, timeout_s: float
    ) -> None:
        """Create (or check) every repartition topic, as many partitions as ``sized``
        gives (``_sizing``)."""
        graph = self.graph
        tasks = self.tasks or ()
        tables = [t.topic for t in self.tables.values() if isinstance(t, Table)]
        known = await ak.partition_counts(producer, [*graph.sources, *tables], timeout_s)
        stage_of = {topic: name for name, topic in graph.repartition.items()}
        wanted = {
            topic: (f"stage {stage_of[topic]}", n)
            for topic, n in sized(graph, tasks, known).items()
        }
        if wanted:
            await ak.ensure_topics(
                producer, wanted, replication, timeout_s, "repartition", REPARTITION_CONFIGS
            )
            # their metadata now, tracked: the first regroup and the trimmer's leaders
            await ak.partition_counts(producer, sorted(wanted), timeout_s, exist=True)

    # --- hooks ----------------------------------------------------------------------------

    def configure(self, config: EosConfig) -> None:
        self.pipeline.configure(config)
        for name, p in zip(self.graph.order, self.members, strict=True):
            # a stage's own inputs, as its records name them (a stage it reads: that
            # stage's repartition topic; ``Seat.aliases`` maps the names back)
            inputs = self.graph.inputs()[name]
            p.configure(config.model_copy(update={"input_topics": inputs}))

    async def on_start(self) -> None:
        await self.pipeline.on_start()
        for p in self.members:
            await p.on_start()

    async def on_stop(self) -> None:
        try:
            for p in (*reversed(self.members), self.pipeline):
                try:  # one that raises does not keep the others from theirs
                    await p.on_stop()
                except Exception:
                    log.exception("%s.on_stop failed", type(p).__name__)
        finally:
            await self.trimmer.stop()

    async def on_assigned(self, partitions: frozenset[tuple[str, int]]) -> None:
        await self.pipeline.on_assigned(partitions)
        for name, p in zip(self.graph.order, self.members, strict=True):
            mine = self._of_stage(name, partitions)
            if mine:
                await p.on_assigned(mine)

    async def on_revoked(self, partitions: frozenset[tuple[str, int]]) -> None:
        for name, p in zip(self.graph.order, self.members, strict=True):
            mine = self._of_stage(name, partitions)
            if mine:
                await p.on_revoked(mine)
        await self.pipeline.on_revoked(partitions)

    def _of_stage(
        self, name: str, partitions: frozenset[tuple[str, int]]
    ) -> frozenset[tuple[str, int]]:
        topics = {self.graph.topic_of(i) for i in self.graph.stages[name].inputs}
        return frozenset(p for p in partitions if p[0] in topics)


def _regroups(result: object) -> bool:
    """Whether a stage's result holds a ``Regroup`` (its event time is then read)."""
    return isinstance(result, Regroup) or (
        isinstance(result, list) and any(isinstance(r, Regroup) for r in result)
    )


def _flat(stage: str, result: object) -> list[Output]:
    """A stage's routed result in a batch as a list of outputs (encoded later, by the
    engine); anything else is a ``TypeError`` naming the stage."""
    if result is None:
        return []
    if isinstance(result, Output):
        return [result]
    if isinstance(result, list) and all(isinstance(o, Output) for o in result):
        return result
    raise TypeError(
        f"stage {stage!r} returned {type(result).__name__}; expected an Output, a Regroup, "
        "a list of them, or None"
    )


def _attr(stage: Any, what: str) -> Mapping[str, Any]:
    value = getattr(stage.processor, what, None) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{type(stage.processor).__name__}.{what} must be a mapping, not {value!r}"
        )
    return value


def _table_topics(stage: Stage) -> list[str]:
    """The topics of ``stage``'s co-partitioned tables (not its global ones)."""
    return [t.topic for t in _attr(stage, "tables").values() if isinstance(t, Table)]


def _tasks(graph: Plan) -> tuple[frozenset[str], ...]:
    """The groups of topics whose partition p go together: each stage with tables or
    ``copartitioned``, its inputs and its tables' topics; groups sharing a topic merged
    into one."""
    groups: list[set[str]] = []
    for name in graph.order:
        tables = _table_topics(graph.stages[name])
        if not tables and not copartitioned(graph.stages[name].processor):
            continue
        group = {*graph.inputs()[name], *tables}
        for other in [g for g in groups if g & group]:
            group |= other
            groups.remove(other)
        groups.append(group)
    return tuple(frozenset(g) for g in groups)


def _topics(graph: Plan) -> dict[str, Any]:
    """The stages' ``topics`` merged, a stage's name standing for its repartition topic;
    one topic declared differently by two stages is a ``ConfigError``."""
    out: dict[str, Any] = {}
    by: dict[str, str] = {}
    for name in graph.order:
        for topic, typed in _attr(graph.stages[name], "topics").items():
            real = graph.topic_of(topic)
            if real in out and out[real] != typed:
                raise ConfigError(
                    f"{graph.name}: stages {by[real]!r} and {name!r} declare {topic!r} "
                    f"differently ({out[real]!r}, {typed!r}): declare it alike"
                )
            out[real], by[real] = typed, name
    return out


def _registry(graph: Plan) -> Any:
    chosen: list[tuple[str, Any]] = [
        (n, r)
        for n in graph.order
        if (r := getattr(graph.stages[n].processor, "schema_registry", None)) is not None
    ]
    for name, registry in chosen[1:]:
        if registry != chosen[0][1]:
            raise ConfigError(
                f"{graph.name}: stages {chosen[0][0]!r} and {name!r} name different schema "
                "registries: a pipeline has one"
            )
    return chosen[0][1] if chosen else None
