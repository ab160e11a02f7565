"""A pipeline's graph: what ``plan`` and ``staged`` accept, the order and topics they
give, and each mistake as one line (``eosflow/_stages``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

import eosflow
from eosflow._stages import Staged, plan, staged
from examples.regroup import ProductCounts


class Pass(eosflow.Processor):
    async def process(self, record: eosflow.Record) -> eosflow.Output:
        return eosflow.Output("out", record.value, key=record.key)


class Counted(Pass):
    stores = {"counts": eosflow.JSON}


class Timed(Pass):
    async def fire(self, timer: eosflow.Timer) -> None:
        return None


class Batched(Pass):
    async def process_batch(self, records: Any) -> list[eosflow.Output]:
        return []


class At(Pass):
    async def process(self, record: eosflow.Record) -> eosflow.Regroup:
        return eosflow.Regroup(key=b"k", value=b"v", timestamp=99)


class TimedBatch(Batched, Timed):
    pass


def pipeline(stages: Mapping[str, eosflow.Stage]) -> eosflow.Pipeline:
    class App(eosflow.Pipeline):
        pass

    app = App()
    app.stages = stages
    return app


def config(**kw: Any) -> eosflow.EosConfig:
    base: dict[str, Any] = dict(
        bootstrap_servers="127.0.0.1:9",
        group_id="g",
        input_topics=("orders",),
        transactional_id="t",
    )
    return eosflow.EosConfig(**{**base, **kw})


def test_a_chain_a_branch_and_a_merge_are_ordered_and_named() -> None:
    app = pipeline(
        {
            "merge": eosflow.Stage(Pass(), inputs=("left", "right")),
            "left": eosflow.Stage(Pass(), inputs=("split",)),
            "right": eosflow.Stage(Pass(), inputs=("split",), partitions=6),
            "split": eosflow.Stage(Pass(), inputs=("orders",)),
        }
    )
    graph = plan(app, "shop")
    assert graph.order.index("split") < graph.order.index("left") < graph.order.index("merge")
    assert graph.order.index("right") < graph.order.index("merge")
    assert graph.sources == ("orders",)
    assert graph.repartition == {
        "split": "shop--split--repartition",
        "left": "shop--left--repartition",
        "right": "shop--right--repartition",
    }  # merge is read by none: no topic
    assert graph.readers["shop--split--repartition"] == ("left", "right")
    text = graph.describe()
    assert "split: Pass <- orders; regroups to shop--split--repartition -> left, right" in text
    assert (
        "right: Pass <- split (stage, shop--split--repartition); regroups to "
        "shop--right--repartition, 6 partitions -> merge" in text
    )


def test_staged_subscribes_sources_and_repartition_topics_and_merges_declarations() -> None:
    runner, cfg = staged(ProductCounts(), config())
    assert isinstance(runner, Staged)
    assert cfg.input_topics == ("orders", "g--by-product--repartition")
    # the stateless stage's topic keeps the witness of its offsets (``Staged._witness``)
    assert dict(runner.stores) == {"per-product": eosflow.JSON, "__positions": eosflow.BYTES}
    assert runner.scope == {
        "orders": frozenset({"__positions"}),
        "g--by-product--repartition": frozenset({"per-product"}),
    }
    assert type(runner).__name__ == "ProductCounts"  # errors name the user's pipeline


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ({}, "App.stages must map stage names to eosflow.Stage"),
        ({"a b": eosflow.Stage(Pass(), inputs=("orders",))}, "stage name 'a b'"),
        ({"a--b": eosflow.Stage(Pass(), inputs=("orders",))}, "stage name 'a--b'"),
        ({"a": Pass()}, "App.stages['a']: expected an eosflow.Stage"),
        ({"a": eosflow.Stage(Pass(), inputs=())}, "App.stages['a'] reads nothing"),
        ({"a": eosflow.Stage(Pass(), inputs=("x", "x"))}, "names an input twice"),
        ({"a": eosflow.Stage(Pass(), inputs=("x",), partitions=0)}, "partitions must be"),
        ({"a": eosflow.Stage(Pass(), inputs=("x",), partitions=True)}, "partitions must be"),
        ({"a": eosflow.Stage(Pass(), inputs=5)}, "App.stages['a'] reads nothing"),  # type: ignore[arg-type]
        (
            {
                "a": eosflow.Stage(Pass(), inputs=("c",)),
                "b": eosflow.Stage(Pass(), inputs=("a",)),
                "c": eosflow.Stage(Pass(), inputs=("b", "orders")),
            },
            "App.stages has a cycle: a -> c -> b -> a",
        ),
        ({"a": eosflow.Stage(Pass(), inputs=("a",))}, "has a cycle: a -> a"),
        (
            {
                "a": eosflow.Stage(Counted(), inputs=("orders",)),
                "b": eosflow.Stage(Counted(), inputs=("a",)),
            },
            "stages 'a' and 'b' both declare the store, window or table 'counts'",
        ),
        (
            {
                "a": eosflow.Stage(Timed(), inputs=("orders",)),
                "b": eosflow.Stage(Timed(), inputs=("orders",)),
            },
            "stages 'a' and 'b' both read 'orders' and keep timers",
        ),
        (
            {
                "a": eosflow.Stage(Pass(), inputs=("orders",)),
                "b": eosflow.Stage(Batched(), inputs=("a",)),
                "c": eosflow.Stage(Counted(), inputs=("a",)),
            },
            "App: stage 'c' keeps stores beside the process_batch stage 'b'",
        ),
        (
            {"a": eosflow.Stage(TimedBatch(), inputs=("orders",))},
            "TimedBatch overrides process_batch and fire",
        ),
    ],
)
def test_each_mistake_is_one_line(stages: Mapping[str, Any], message: str) -> None:
    with pytest.raises(eosflow.ConfigError, match=None) as caught:
        plan(pipeline(stages), "g")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_one_processor_in_two_stages_and_unread_inputs_are_refused() -> None:
    shared = Pass()
    app = pipeline(
        {
            "a": eosflow.Stage(shared, inputs=("orders",)),
            "b": eosflow.Stage(shared, inputs=("a",)),
        }
    )
    with pytest.raises(eosflow.ConfigError, match="share one processor object"):
        plan(app, "g")
    with pytest.raises(eosflow.ConfigError, match="input topic 'clicks' is read by no stage"):
        staged(ProductCounts(), config(input_topics=("orders", "clicks")))
    with pytest.raises(eosflow.ConfigError, match="auto_offset_reset=latest would skip"):
        staged(ProductCounts(), config(auto_offset_reset="latest"))


def test_a_topic_two_stages_declare_differently_is_refused() -> None:
    class Typed(Pass):
        topics = {"a": eosflow.Topic(value=str)}

    class Other(Pass):
        topics = {"a": eosflow.Topic(value=eosflow.JSON)}

    app = pipeline(
        {
            "a": eosflow.Stage(Typed(), inputs=("orders",)),
            "b": eosflow.Stage(Other(), inputs=("a",)),
        }
    )
    with pytest.raises(eosflow.ConfigError, match="stages 'a' and 'b' declare 'a' differently"):
        staged(app, config())


async def test_regroups_become_outputs_to_the_stage_topic_with_the_record_time() -> None:
    runner, _ = staged(ProductCounts(), config())
    record = eosflow.Record("orders", 0, 7, b"c1", b'{"product": "p9"}', timestamp=1234)
    out = runner.route(await runner.process(record))  # as the engine routes it
    assert out == eosflow.Output(
        "g--by-product--repartition", b'{"product": "p9"}', key="p9", timestamp=1234
    )

    explicit, _ = staged(
        pipeline(
            {
                "a": eosflow.Stage(At(), inputs=("orders",)),
                "b": eosflow.Stage(Pass(), inputs=("a",)),
            }
        ),
        config(),
    )
    assert explicit.route(await explicit.process(record)).timestamp == 99  # type: ignore[union-attr]

    class Lost(Pass):
        async def process(self, record: eosflow.Record) -> eosflow.Regroup:
            return eosflow.Regroup(key=b"k", value=b"v")

    lone, _ = staged(pipeline({"a": eosflow.Stage(Lost(), inputs=("orders",))}), config())
    with pytest.raises(TypeError, match="stage 'a' returned a Regroup, but no stage reads 'a'"):
        lone.route(await lone.process(record))


# A pipeline with a batch stage runs the engine's batch strategy (the class overrides
# process_batch only then), and each stage is configured with its own inputs as it names
# its records name them. Caught: process_batch not routed (the pipeline ran per record:
# the batch stage never called); the whole pipeline's inputs handed to every stage.
async def test_a_batch_stage_makes_the_pipeline_a_batch_and_each_stage_its_inputs() -> None:
    from eosflow._processor import overrides_batch

    class Seen(Batched):
        def configure(self, config: eosflow.EosConfig) -> None:
            self.inputs = config.input_topics

        async def process_batch(self, records: Any) -> list[eosflow.Output]:
            return [eosflow.Output("out", r.value, key=r.key) for r in records]

    first, second = Pass(), Seen()
    app = pipeline(
        {"a": eosflow.Stage(first, inputs=("orders",)), "b": eosflow.Stage(second, inputs=("a",))}
    )
    runner, cfg = staged(app, config())
    assert overrides_batch(runner) and not overrides_batch(staged(ProductCounts(), config())[0])
    runner.configure(cfg)
    assert second.inputs == ("g--a--repartition",)  # as its records name it
    assert cfg.input_topics == ("orders", "g--a--repartition")
    records = [
        eosflow.Record("g--a--repartition", 0, 3, b"k", b"regrouped", timestamp=5),
        eosflow.Record("orders", 0, 7, b"c1", b"order", timestamp=9),
    ]
    out = await runner.process_batch(records)
    assert out == [
        eosflow.Output("out", b"order", key=b"c1"),  # stage a, per record
        eosflow.Output("out", b"regrouped", key=b"k"),  # stage b, its records in one call
    ]


# A pipeline's lag per stage: each stage's is the sum over the topics it reads (a topic
# two stages read counts for both), in graph order, on the progress line, in its JSON
# fields and in the eosflow_stage_lag gauge -- and an app of a pipeline names its stages
# to them. Caught: EosApp not naming the stages (the line without "by stage"); a stage
# summing the lag of every topic (the figures asserted).
def test_a_pipelines_lag_is_given_per_stage(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from eosflow._ops._metrics import PrometheusMetrics

    app = pipeline(
        {
            "count": eosflow.Stage(Pass(), inputs=("split",)),
            "audit": eosflow.Stage(Pass(), inputs=("orders", "split")),
            "split": eosflow.Stage(Pass(), inputs=("orders",)),
        }
    )
    running = eosflow.EosApp(app, config(ops={"progress_interval_s": 10}))
    progress = running.ops.progress
    assert progress is not None
    regrouped = "g--split--repartition"
    assert progress.stages == {
        "split": frozenset({"orders"}),
        "count": frozenset({regrouped}),
        "audit": frozenset({"orders", regrouped}),
    }
    lag = {("orders", 0): 3, ("orders", 1): 4, (regrouped, 0): 5}
    progress.lag_sampled(lag)
    with caplog.at_level(logging.INFO, logger="eosflow.progress"):
        progress.emit(progress._since + 10)
    (line,) = caplog.records
    assert "lag 12 over 3 partitions (by stage: split 7, count 5, audit 12)," in line.getMessage()
    assert line.progress["stage_lag"] == {"split": 7, "count": 5, "audit": 12}  # type: ignore[attr-defined]
    metrics = PrometheusMetrics()
    metrics.stages = progress.stages
    metrics.partitions_assigned(frozenset(lag))
    metrics.lag_sampled(lag)
    for stage, want in (("split", 7), ("count", 5), ("audit", 12)):
        assert metrics.registry.get_sample_value("eosflow_stage_lag", {"stage": stage}) == want


class Joined(Pass):
    copartitioned = True


class WithTable(Pass):
    tables = {"prices": eosflow.Table("prices")}


# How many partitions each repartition topic gets (``_sizing.sized``): the table's count
# carries down the chain, Stage.partitions stays (the mismatch is refused at start), a
# join of two regrouped inputs takes the larger default. Caught: a table's count not
# taken (4, the orders', down the chain); a regrouped-only join's sides left at their
# own defaults (3 and 2).
def test_repartition_topics_are_sized_for_the_stages_that_join_them() -> None:
    from eosflow._stages._sizing import sized

    def sizes(stages: Mapping[str, eosflow.Stage], known: dict[str, int]) -> dict[str, int]:
        runner, _ = staged(pipeline(stages), config(input_topics=tuple(known)[:1]))
        return {
            t.split("--")[1]: n for t, n in sized(runner.graph, runner.tasks or (), known).items()
        }

    table = {
        "by-product": eosflow.Stage(Pass(), inputs=("orders",)),
        "priced": eosflow.Stage(WithTable(), inputs=("by-product",)),
        "again": eosflow.Stage(Pass(), inputs=("priced",)),
        "last": eosflow.Stage(Pass(), inputs=("again",)),
    }
    assert sizes(table, {"orders": 4, "prices": 2}) == {"by-product": 2, "priced": 2, "again": 2}
    explicit = {**table, "by-product": eosflow.Stage(Pass(), inputs=("orders",), partitions=6)}
    assert sizes(explicit, {"orders": 4, "prices": 2})["by-product"] == 6  # refused at start
    joined = {
        "orders-by-id": eosflow.Stage(Pass(), inputs=("orders",)),
        "payments-by-id": eosflow.Stage(Pass(), inputs=("payments",)),
        "paid": eosflow.Stage(Joined(), inputs=("orders-by-id", "payments-by-id")),
    }
    runner, _ = staged(pipeline(joined), config(input_topics=("orders", "payments")))
    assert runner.tasks == (
        frozenset({"g--orders-by-id--repartition", "g--payments-by-id--repartition"}),
    )
    assert sized(runner.graph, runner.tasks, {"orders": 3, "payments": 2}) == {
        "g--orders-by-id--repartition": 3,
        "g--payments-by-id--repartition": 3,
    }


# A batch stage's view of the transaction's BatchState names only its own stores and
# windows (a stage reaches only what it declares). Caught: the view keeping every
# stage's names (the other stage's store and window reachable).
def test_a_batch_stages_view_names_only_its_own_state() -> None:
    from eosflow._state import BatchState

    def never(name: str, partition: tuple[str, int]) -> Any:
        raise AssertionError("not opened")

    window = eosflow.Tumbling(size_s=60)
    state = BatchState(never, {"theirs-w": window}, ["mine", "theirs"])  # type: ignore[dict-item]
    view = state.narrowed([], {"mine"})
    with pytest.raises(KeyError, match="no store 'theirs'"):
        view.store("theirs", ("t", 0))
    with pytest.raises(KeyError, match="no window 'theirs-w'"):
        view.windows("theirs-w")
    assert state.windows("theirs-w") == []  # the whole transaction's state has both


# Counts that differ within a group of topics read together are one line, naming both
# topics and the setting. Caught: the groups' check skipped (nothing refused).
def test_a_group_of_topics_of_different_counts_is_one_line() -> None:
    from eosflow._state._tables import check_partitions

    tasks = (frozenset({"g--a--repartition", "prices"}), frozenset({"orders"}))
    counts = {"g--a--repartition": 3, "prices": 2, "orders": 5}
    with pytest.raises(eosflow.ConfigError) as caught:
        check_partitions({}, ("orders", "g--a--repartition"), counts, True, tasks)
    message = str(caught.value)
    assert "'g--a--repartition' has 3 partitions and 'prices' 2" in message
    assert "Stage.partitions" in message and "\n" not in message
    check_partitions({}, ("orders",), {**counts, "prices": 3}, True, tasks)  # 5 alone: fine
