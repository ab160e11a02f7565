"""Exactly-once under chaos on genuine Kafka, the broker side included.

Three KRaft brokers of Apache Kafka (RF 3, ``min.insync.replicas=2`` on every topic the
test uses and on the internal ones) and three `eosflow run` instances copying 20,000
records from 6 partitions to 3 (``tests/fleet.py``, shared with
``tests/runtime/test_chaos.py``). A seeded schedule, each step gated on the group's
committed progress so that it lands mid-stream:

1. SIGKILL the broker leading the ``__transaction_state`` partition of one instance's
   transactional id (its transaction coordinator), and restart it after a pause;
2. SIGKILL an instance and restart it;
3. SIGSTOP an instance past its session timeout, then SIGCONT it (a zombie);
4. SIGSTOP the broker leading the group's ``__consumer_offsets`` partition (its group
   coordinator) for longer than the clients' request timeout, then SIGCONT it;
5. SIGKILL an instance and restart it.

The same run goes three ways (each takes about two minutes, so each protocol pair is
run where it adds the most):
- over PLAINTEXT, under the consumer group protocol (KIP-848, the broker's 6 s
  consumer-group session) with transactions v2 (KIP-890 part 2): the newest paths meet
  a dying coordinator;
- over SASL_SSL (SCRAM-SHA-512, with the documented ACLs, ``SecuredKafka``)
  under the classic protocol and transactions v1: there a dying broker cuts TLS
  connections mid-record, which must stay a retried network failure, and every
  reconnection logs in again;
- with state, over PLAINTEXT, consumer protocol and transactions v2: the instances run
  the running count with its windows and timers (``tests/procs/slow_time.py``) over 500
  keys, their changelogs replicated three times; then the count of every key must equal
  its input records, each key's outputs be exactly 1..n, no aborted changelog write be
  visible (``eosflow.testing.check_counts``), and every window's final and every timer
  be emitted exactly once as the input alone gives them (``check_windows``);
- typed, over PLAINTEXT, consumer protocol and transactions v2: the input in Avro
  through a genuine schema registry (written by confluent-kafka's ``AvroSerializer``),
  a ``Tally`` model per key in a store, each record's new tally written in Avro
  (``tests/procs/slow_typed.py``); then every output must decode (confluent-kafka's
  ``AvroDeserializer``) and each key's tallies be exactly counts 1..n with the running
  totals of its amounts in offset order -- every value decoded as written.

Then a read_committed check must find every input exactly once (0 duplicates, 0
losses, no strays) and the group's committed offsets at the input's end offsets; no
instance may have died on the way (every fault here is one eosflow must survive) and
each exits 0 on SIGTERM.

eosflow's settings for broker failover: under the classic protocol an 8 s session
(heartbeats every 0.8 s) so that a group coordinator moving to another broker (the
controller fences a dead broker after ``broker.session.timeout.ms``, 4 s here) does not
expel every member on the way; the transaction timeout below it (6.4 s) as eosflow
requires; and ``retry_timeout_s`` well past the longest outage (the SIGSTOPped
coordinator: the request timeout and more), so that recovery is expected throughout,
while a livelock still ends in a fatal exit within the test's deadline.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import signal
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from conftest import genuine, version
from fleet import Fleet, chaos_env, seed, until_committed
from kit import broker_has_kip848, broker_has_txn_v2, create_topic
from stateful import counts_ok, event_times, reminders_ok, seed_keys, time_ok
from test_security import grant_fleet, scram_env
from typed_chaos import seed_readings, tallies_ok

from eosflow.testing import check_exactly_once
from eosflow.testing._genuine import GenuineKafka
from eosflow.testing._genuine_jars import uses_zookeeper
from eosflow.testing._ladder import Broker

pytestmark = pytest.mark.genuine

RECORDS, IN_PARTS, OUT_PARTS, INSTANCES, BROKERS = 20_000, 6, 3, 3, 3
KEYS = 500  # the counting run's distinct keys
SESSION_S = 8.0
RETRY_TIMEOUT_S = 120.0
DELAY_S = 0.004  # per record: ~30 s of copying undisturbed, so every fault lands mid-stream
# eosflow leaves aiokafka's request timeout at its default (consumer and producer alike)
REQUEST_TIMEOUT_S = inspect.signature(AIOKafkaConsumer).parameters["request_timeout_ms"].default
REQUEST_TIMEOUT_S /= 1000


def _replication_is_for_three(k: GenuineKafka) -> None:
    for node in k.node_ids:
        s = k.settings(node)
        assert s["default.replication.factor"] == "3" and s["min.insync.replicas"] == "2"
        assert s["offsets.topic.replication.factor"] == "3"
        assert s["transaction.state.log.replication.factor"] == "3"
        assert s["transaction.state.log.min.isr"] == "2"


@pytest.mark.parametrize(
    ("listener", "work", "protocol"),
    [
        ("PLAINTEXT", "copy", "consumer+v2"),
        ("SASL_SSL", "copy", "classic"),
        ("PLAINTEXT", "count", "consumer+v2"),
        ("PLAINTEXT", "typed", "consumer+v2"),
    ],
)
async def test_exactly_once_under_broker_and_instance_chaos(
    listener: str, work: str, protocol: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    v = version()
    if uses_zookeeper(v):
        pytest.skip(f"Kafka {v}: the zombie's recovery needs KIP-360 (Kafka 2.5+)")
    newest = protocol == "consumer+v2"
    secured = listener == "SASL_SSL"
    rng = random.Random(20261123)
    async with genuine(v, brokers=BROKERS, secured=secured) as k:
        _replication_is_for_three(k)
        bs = k.bootstrap_servers
        if newest and not (await broker_has_kip848(bs) and await broker_has_txn_v2(bs)):
            pytest.skip(f"Kafka {v} lacks the consumer group protocol or transactions v2")
        src, dst = Broker.unique("bchaos-in"), Broker.unique("bchaos-out")
        group = Broker.unique("bchaos-g")
        await create_topic(bs, src, IN_PARTS, replication=BROKERS)
        counting = work == "count"
        for topic in (
            (dst, *(f"{dst}-{t}" for t in ("windows", "recent", "timers", "reminders")))
            if counting
            else (dst,)
        ):
            await create_topic(bs, topic, OUT_PARTS, replication=BROKERS)
        typed = work == "typed"
        registry = request.getfixturevalue("eosflow_schema_registry").url if typed else ""
        if counting:
            await seed_keys(bs, src, RECORDS, KEYS, timestamp_ms=event_times(rng))
        elif typed:
            await seed_readings(bs, src, RECORDS, KEYS, registry)
        else:
            await seed(bs, src, RECORDS)
        env = chaos_env(SESSION_S) | {
            "EOSFLOW_RETRY_TIMEOUT_S": str(RETRY_TIMEOUT_S),
            "CHAOS_DELAY_S": str(DELAY_S),
            "EOSFLOW_STATE_DIR": str(tmp_path),
            "EOSFLOW_GROUP_PROTOCOL": "consumer" if newest else "classic",
            "EOSFLOW_TRANSACTIONS_V2": str(newest).lower(),
        }
        servers = k.secured_servers() if secured else bs
        env |= scram_env(k) if secured else {}
        if typed:
            env |= {"EOSFLOW_SCHEMA_REGISTRY_URL": registry, "CHAOS_IN": src}
        target = {"count": "slow_time:SlowTime", "typed": "slow_typed:SlowTyped"}.get(
            work, "slow_copy:SlowCopy"
        )
        fleet = Fleet(
            servers, src, dst, group, Broker.unique("bchaos"), env, bs, target, log_dir=tmp_path
        )
        if secured:
            await grant_fleet(k, fleet, INSTANCES)
        for i in range(INSTANCES):
            await fleet.start(i)
        events: list[str] = []
        began = time.monotonic()

        async def at(fraction: float, what: str) -> None:
            """Wait until ``fraction`` of the input is committed, then log ``what``; the
            fault must land while input is left to copy."""
            done = await until_committed(fleet, IN_PARTS, int(RECORDS * fraction), 240, events)
            events.append(f"{time.monotonic() - began:.1f}s at {done} committed: {what}")
            assert done < RECORDS, f"the copy ended before the fault: {events}"

        try:
            # 1. the transaction coordinator's broker of one instance: SIGKILL, restart
            txn_id = fleet.transactional_id(rng.randrange(INSTANCES))
            victim = await k.coordinator(txn_id, "transaction")
            await at(0.05, f"SIGKILL broker {victim} (txn coordinator of {txn_id})")
            k.kill(victim)
            await asyncio.sleep(rng.uniform(2.0, 4.0))
            await k.restart(victim)
            events.append(f"{time.monotonic() - began:.1f}s broker {victim} restarted")

            # 2. an instance: SIGKILL, restart
            a = rng.randrange(INSTANCES)
            await at(0.2, f"SIGKILL+restart instance {a}")
            await fleet.kill_and_restart(a, events)

            # 3. a zombie: an instance SIGSTOPped past its session timeout
            z = rng.choice([i for i in range(INSTANCES) if i != a])
            await at(0.3, f"SIGSTOP instance {z} for {SESSION_S * 1.5:.1f} s")
            fleet.signal(z, signal.SIGSTOP)
            await asyncio.sleep(SESSION_S * 1.5)
            fleet.signal(z, signal.SIGCONT)
            events.append(f"{time.monotonic() - began:.1f}s SIGCONT instance {z}")

            # 4. the group coordinator's broker: SIGSTOP past the request timeout
            coord = await k.coordinator(group, "group")
            pause = REQUEST_TIMEOUT_S + rng.uniform(3.0, 6.0)
            await at(0.4, f"SIGSTOP broker {coord} (group coordinator) for {pause:.1f} s")
            k.stop_node(coord)
            await asyncio.sleep(pause)
            k.cont(coord)
            events.append(f"{time.monotonic() - began:.1f}s SIGCONT broker {coord}")

            # 5. an instance: SIGKILL, restart
            b = rng.randrange(INSTANCES)
            await at(0.5, f"SIGKILL+restart instance {b}")
            await fleet.kill_and_restart(b, events)

            await until_committed(fleet, IN_PARTS, RECORDS, 240, events)
            events.append(f"{time.monotonic() - began:.1f}s all committed")
            if counting:  # the last wall-clock reminders fire while the instances run
                await reminders_ok(bs, src, dst)
        except BaseException:
            print(f"events: {events}\n{k.log_tail(40)}")
            raise
        finally:
            codes = await fleet.stop_all()
        assert codes == [0] * INSTANCES, f"exit codes {codes}; events {events}"
        if counting:
            state = await counts_ok(bs, src, group, output=dst)
            assert state.found == KEYS, f"{state.summary()}\nevents: {events}"
            await time_ok(bs, src, dst)
            print(f"events: {events}\n{state.summary()}")
            return
        if typed:
            await tallies_ok(bs, src, dst, registry, events)
            return
        report = await check_exactly_once(bs, src, dst, match="key", group_id=group)
        assert report.ok, report.summary() + f"\nevents: {events}"
        assert report.inputs == RECORDS and report.outputs == RECORDS
        print(f"events: {events}")
