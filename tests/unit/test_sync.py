"""``_state/_sync.py``: the order in which a processor with tables sees its records, in
process. The comment above each test names the mutation that made it fail."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from eosflow import Record
from eosflow._state import _sync
from eosflow._state._sync import Feed, Sync

Partition = tuple[str, int]


def rec(topic: str, partition: int, offset: int, ts: int) -> Record:
    return Record(topic, partition, offset, b"k", b"v", (), ts)


class Consumer:
    """What the session gives the sync: caught-up partitions, and pauses."""

    def __init__(self, caught_up: Iterable[Partition] = ()) -> None:
        self.caught: set[Partition] = set(caught_up)
        self.paused: set[Partition] = set()
        self.calls: list[tuple[Partition, bool]] = []

    def feed(self) -> Feed:
        return Feed(self.caught.__contains__, self.throttle)

    def throttle(self, partition: Partition, paused: bool) -> None:
        self.calls.append((partition, paused))
        (self.paused.add if paused else self.paused.discard)(partition)


def admit(sync: Sync, records: list[Record], max_records: int) -> list[Record]:
    """``sync.admit`` of ``records`` as a poll hands them over: a list per partition."""
    runs: list[list[Record]] = []
    for r in records:
        if not runs or (runs[-1][0].topic, runs[-1][0].partition) != (r.topic, r.partition):
            runs.append([])
        runs[-1].append(r)
    return sync.admit(runs, max_records)


def order(out: list[Record]) -> list[tuple[str, int]]:
    return [(r.topic, r.offset) for r in out]


# Records and rows of one task go by timestamp, a row first on a tie; another task's
# records do not wait for this one. Caught: heads compared by offset (the poll's order).
def test_a_task_hands_on_by_timestamp_a_row_first_on_a_tie() -> None:
    c = Consumer()
    s = Sync(["orders"], ["customers"], feed=c.feed())
    polled = [rec("orders", 0, 0, 10), rec("orders", 0, 1, 20), rec("orders", 0, 2, 30)]
    polled += [rec("customers", 0, 0, 5), rec("customers", 0, 1, 20), rec("customers", 0, 2, 40)]
    out = admit(s, polled, 100)
    # customers[0] at 40 waits: orders[0] is empty and not read to its end
    assert order(out) == [
        ("customers", 0),
        ("orders", 0),
        ("customers", 1),
        ("orders", 1),
        ("orders", 2),
    ]
    c.caught.add(("orders", 0))
    assert order(admit(s, [], 100)) == [("customers", 2)]


# A record waits while its table partition holds nothing and is not read to its end;
# it goes once the table caught up. Caught: an empty partition taken as caught up.
def test_a_record_waits_for_its_table_to_catch_up() -> None:
    c = Consumer()
    s = Sync(["orders"], ["customers"], feed=c.feed())
    assert admit(s, [rec("orders", 1, 0, 10)], 100) == []
    assert s.buffered() == 1
    c.caught.add(("customers", 1))
    assert order(admit(s, [], 100)) == [("orders", 0)]


# An admit hands on at most max_records and says more wait; the rest go next time, in
# order. Caught: the cap ignored (a transaction's record limit exceeded).
def test_an_admit_stops_at_its_max_records() -> None:
    c = Consumer([("customers", 0)])
    s = Sync(["orders"], ["customers"], feed=c.feed())
    out = admit(s, [rec("orders", 0, i, i) for i in range(10)], 4)
    assert order(out) == [("orders", i) for i in range(4)] and s.more
    assert order(admit(s, [], 100)) == [("orders", i) for i in range(4, 10)] and not s.more


# A partition past MAX_BUFFERED records is paused, resumed once half went on, and a
# partition positioned again drops its buffer and its pause. Caught: no pause (the
# buffer grew without bound), forget leaving the partition paused.
def test_a_full_buffer_pauses_its_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sync, "MAX_BUFFERED", 4)
    c = Consumer()
    s = Sync(["orders"], ["customers"], feed=c.feed())
    assert admit(s, [rec("orders", 0, i, i) for i in range(6)], 100) == []
    assert c.paused == {("orders", 0)}
    c.caught.add(("customers", 0))
    assert len(admit(s, [], 3)) == 3 and c.paused == {("orders", 0)}  # 3 left: > 2
    assert len(admit(s, [], 1)) == 1 and c.paused == set()  # 2 left: resumed
    admit(s, [rec("orders", 0, 6 + i, 6 + i) for i in range(5)], 0)
    assert c.paused == {("orders", 0)}
    s.forget(("orders", 0))
    assert c.paused == set() and s.buffered() == 0


# With max_idle_s, a task whose table caught up but holds nothing waits that long once,
# then goes on without re-waiting per record. Caught: the wait restarted after every
# record (each record waited max_idle_s).
def test_idle_waits_once_per_stretch() -> None:
    now = [0.0]
    c = Consumer([("customers", 0)])
    s = Sync(["orders"], ["customers"], idle_s=1.0, clock=lambda: now[0], feed=c.feed())
    assert admit(s, [rec("orders", 0, 0, 1)], 100) == []
    now[0] = 1.5
    assert order(admit(s, [], 100)) == [("orders", 0)]
    assert order(admit(s, [rec("orders", 0, 1, 2)], 100)) == [("orders", 1)]


# Records of the last admit given back (a transaction past its deadline) are handed on
# first next time, in the order they left, before the records still buffered and those
# polled since; the consumer is not sought (the caller's fallback). Caught: give_back
# refusing (every buffered record of those partitions fetched and decoded again), the
# records put back at the tail (handed on after newer ones), or in reverse order.
def test_records_given_back_go_first_in_their_order() -> None:
    c = Consumer([("customers", 0), ("orders", 0)])
    s = Sync(["orders"], ["customers"], feed=c.feed())
    polled = [rec("orders", 0, i, 2 * i) for i in range(6)]
    polled += [rec("customers", 0, i, 2 * i + 1) for i in range(3)]
    out = admit(s, polled, 5)
    head = [("orders", 0), ("customers", 0), ("orders", 1), ("customers", 1), ("orders", 2)]
    assert order(out) == head
    assert s.give_back(out[2:]) and s.more  # two processed, three back
    later = [rec("orders", 0, 6, 12), rec("customers", 0, 3, 13)]
    assert order(admit(s, later, 100)) == [
        ("orders", 1),
        ("customers", 1),
        ("orders", 2),
        ("customers", 2),
        ("orders", 3),
        ("orders", 4),
        ("orders", 5),
        ("orders", 6),
        ("customers", 3),
    ]
    assert s.buffered() == 0


# A give_back after a partition was positioned again (an abort's rewind, a revocation)
# takes nothing: the consumer delivers those records anew, and keeping them too would
# hand them on twice. Likewise records not older than their buffer's head (not the last
# admit's). Caught: the forget not counted, the head not compared.
def test_a_give_back_after_a_seek_or_out_of_order_takes_nothing() -> None:
    c = Consumer([("customers", 0), ("orders", 0)])
    s = Sync(["orders"], ["customers"], feed=c.feed())
    out = admit(s, [rec("orders", 0, i, i) for i in range(4)], 2)
    s.forget(("orders", 0))
    assert not s.give_back(out) and s.buffered() == 0
    out = admit(s, [rec("orders", 0, i, i) for i in range(4)], 2)
    assert not s.give_back([rec("orders", 0, 2, 2)]) and s.buffered() == 2
    assert s.give_back(out) and s.buffered() == 4


def head_merge(queues: dict[Partition, list[Record]], rank: dict[str, int], cap: int) -> list:
    """The reference: of the queues' heads, the lowest (timestamp, rank) goes, one record
    at a time, until ``cap`` or every queue is empty (all read to their end)."""
    out = []
    while len(out) < cap and any(queues.values()):
        q = min((q for q in queues.values() if q), key=lambda q: (q[0].timestamp, rank[q[0].topic]))
        out.append(q.pop(0))
    return out


# With every partition read to its end, a task's records go in the order of a merge of
# its partitions' heads by (timestamp, rank), whatever the timestamps (ties, going back
# within a partition), the polls and the caps: checked against a one-record-at-a-time
# reference over random polls of two tables and a stream, and of one table and a
# stream. Caught: a tie handed to the higher rank (two queues; more than two), the
# next head's timestamp taken as a bound in both cases, a run not stopped at the cap.
@pytest.mark.parametrize("tables", [["customers"], ["accounts", "customers"]])
@pytest.mark.parametrize("seed", range(30))
def test_a_task_hands_on_the_head_merge_of_its_partitions(tables: list[str], seed: int) -> None:
    rng = random.Random(seed)
    topics = [*tables, "orders"]
    caught = [(t, p) for t in topics for p in (0, 1)]
    s = Sync(["orders"], tables, feed=Consumer(caught).feed())
    rank = {t: i for i, t in enumerate([*sorted(tables), "orders"])}
    ref: dict[Partition, list[Record]] = {k: [] for k in caught}
    offsets = dict.fromkeys(caught, 0)
    clock = 0
    for _ in range(40):
        polled = []
        for t, p in rng.sample(caught, rng.randint(1, len(caught))):
            for _ in range(rng.choice([1, 2, 5, 12])):
                clock += rng.choice([0, 0, 1, 3])
                stamp = clock - rng.choice([0, 0, 0, 2])  # sometimes back in time
                polled.append(rec(t, p, offsets[(t, p)], stamp))
                offsets[(t, p)] += 1
        cap = rng.choice([3, 10, 1000])
        got = admit(s, sorted(polled, key=lambda r: (r.topic, r.partition)), cap)
        for r in polled:
            ref[(r.topic, r.partition)].append(r)
        want = []
        for task in (0, 1):
            queues = {k: q for k, q in ref.items() if k[1] == task}
            want += head_merge(queues, rank, cap - len(want))
        assert order(got) == order(want), (seed, len(got), len(want))


# A pipeline's groups (``Sync.group``): partition p of a stage's input and its table go
# together; a topic in no group goes alone, in offset order, waiting for nothing.
# Caught: ``group`` ignored (the source's records waited for regrouped[0] and prices[0],
# neither read to its end); a lone topic put in every group (the same).
def test_grouped_topics_wait_for_each_other_and_a_lone_topic_for_none() -> None:
    c = Consumer()
    s = Sync(["orders", "regrouped"], ["prices"], feed=c.feed())
    s.group([frozenset({"regrouped", "prices"})])
    polled = [rec("orders", 0, 0, 30), rec("orders", 0, 1, 10)]
    polled += [rec("regrouped", 0, 0, 10), rec("prices", 0, 0, 5), rec("prices", 0, 1, 20)]
    out = admit(s, polled, 100)
    # the orders go in offset order, whatever their timestamps and the other topics; in
    # the group, prices[0] at 20 waits: regrouped[0] is empty and not read to its end
    assert order(out) == [("prices", 0), ("regrouped", 0), ("orders", 0), ("orders", 1)]
    c.caught.add(("regrouped", 0))
    assert order(admit(s, [], 100)) == [("prices", 1)]
