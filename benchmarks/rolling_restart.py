"""A rolling restart under each group protocol (issue 23): how much work a restart costs.

    python -m benchmarks rolling --broker genuine                 # classic, then consumer
    python -m benchmarks rolling --protocols consumer --rounds 2

Per protocol: a topic of ``--partitions`` partitions is fed at ``--rate`` records/s
throughout; ``--instances`` ``eosflow run`` instances of a pass-through processor copy it
(each with its metrics port). Once all of them have committed work, each instance in turn
is stopped with SIGTERM (it finishes its transaction and leaves the group), started again
with the same transactional id, and given ``--settle-s`` before the next one goes;
``--rounds`` times over. Then the feed stops, the group catches up, every instance is
stopped, and ``check_exactly_once`` reads both topics read_committed.

What a restart cost, per protocol:

- **records redone**: ``eosflow_records_aborted`` summed over every incarnation (scraped
  before each SIGTERM and at the end): records processed in a transaction that did not
  commit, which the group processed again;
- **aborted records in the output**: read_uncommitted minus read_committed records of the
  output topic (what reached the broker and was then aborted);
- **aborted transactions** by reason, and the time from the first SIGTERM to the end.

The broker runs with Kafka's own defaults for the consumer protocol's heartbeat (5 s) and
session (45 s), not the test ladder's 250 ms / 6 s; eosflow with its own defaults. Every
child is stopped by pid, the broker too, however the run ends. Exit status 1 when a
protocol's run was not exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from benchmarks._bench_broker import broker
from eosflow.testing import check_exactly_once, read_topic, spawn_run
from eosflow.testing._genuine_procs import free_ports

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TARGET = "benchmarks._stress_proc:PassThrough"
KAFKA_DEFAULTS = {  # the consumer protocol as a production broker runs it
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.session.timeout.ms": "45000",
}
_SAMPLE = re.compile(r"^(eosflow_[a-z_]+?)(?:_total)?(?:\{([^}]*)\})? ([0-9.e+-]+)$")


@dataclass
class Outcome:
    protocol: str
    records: int = 0  # fed into the input topic
    restarts: int = 0
    redone: int = 0  # eosflow_records_aborted over every incarnation
    aborted_in_output: int = 0  # read_uncommitted - read_committed of the output topic
    aborted_txns: dict[str, int] = field(default_factory=dict)  # by reason
    committed_txns: int = 0
    restart_span_s: float = 0.0  # the first SIGTERM to the last restart settled
    catch_up_s: float = 0.0  # the feed's end to the group's committed end
    exactly_once: bool = False
    check: str = ""


class Instance:
    def __init__(
        self, index: int, run_id: str, protocol: str, settings: dict[str, str] | None = None
    ) -> None:
        self.index, self.txn_id, self.protocol = index, f"{run_id}-{index}", protocol
        self.settings = settings or {}  # EOSFLOW_* from --set
        self.port = free_ports(1)[0]
        self.proc: asyncio.subprocess.Process | None = None
        self.totals: Counter[str] = Counter()  # summed over finished incarnations

    async def start(self, bootstrap: str, src: str, dst: str, group: str) -> None:
        self.proc = await spawn_run(
            TARGET,
            bootstrap_servers=bootstrap,
            group_id=group,
            input_topics=(src,),
            transactional_id=self.txn_id,
            env={
                "PYTHONPATH": str(ROOT),
                "STRESS_OUT": dst,
                "EOSFLOW_GROUP_PROTOCOL": self.protocol,
                "EOSFLOW_METRICS_PORT": str(self.port),
                **self.settings,
            },
        )

    def scrape(self) -> Counter[str]:
        """This incarnation's counters (name or name{labels} -> value); empty while its
        metrics port is not up yet."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return Counter()
        out: Counter[str] = Counter()
        for line in text.splitlines():
            m = _SAMPLE.match(line)
            if m and not m.group(1).endswith("_created"):
                out[m.group(1) + (f"{{{m.group(2)}}}" if m.group(2) else "")] += int(
                    float(m.group(3))
                )
        return out

    async def stop(self) -> None:
        """SIGTERM, counted in: its counters just before, its exit checked."""
        if self.proc is None:
            return
        self.totals += await asyncio.to_thread(self.scrape)
        proc, self.proc = self.proc, None
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(60):
                code = await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise SystemExit(f"instance {self.index} ignored SIGTERM for 60 s") from None
        if code != 0:
            raise SystemExit(f"instance {self.index} exited {code}")

    def alive(self) -> None:
        if self.proc is not None and self.proc.returncode is not None:
            raise SystemExit(f"instance {self.index} died ({self.proc.returncode})")


async def committed(bootstrap: str, topic: str, partitions: int, group: str) -> int:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        return sum([await c.committed(TopicPartition(topic, p)) or 0 for p in range(partitions)])
    finally:
        await c.stop()


async def feed(bootstrap: str, topic: str, rate: float, done: asyncio.Event) -> int:
    """Unique keyed records at ``rate`` per second until ``done``; returns how many."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    n, started, sends = 0, time.monotonic(), []
    try:
        while not done.is_set():
            due = int((time.monotonic() - started) * rate)
            for _ in range(due - n):
                sends.append(await producer.send(topic, f"v{n}".encode(), key=f"k{n}".encode()))
                n += 1
            await asyncio.sleep(0.01)
        await asyncio.gather(*sends)
    finally:
        await producer.stop()
    return n


async def one_protocol(bootstrap: str, protocol: str, args: argparse.Namespace) -> Outcome:
    run_id = f"roll-{protocol}-{int(time.time())}"
    src, dst, group = f"{run_id}-in", f"{run_id}-out", f"{run_id}-g"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(src, args.partitions, 1), NewTopic(dst, 3, 1)])
    finally:
        await admin.close()
    out = Outcome(protocol)
    fleet = [Instance(i, run_id, protocol, args.settings) for i in range(args.instances)]
    done = asyncio.Event()
    feeding = asyncio.create_task(feed(bootstrap, src, args.rate, done))
    try:
        for inst in fleet:
            await inst.start(bootstrap, src, dst, group)
        await until(
            lambda: all(i.scrape()['eosflow_transactions{outcome="committed"}'] for i in fleet),
            fleet,
            args.timeout_s,
            "every instance committing",
        )
        print(f"[{protocol}] {args.instances} instances committing; rolling restart", flush=True)
        began = time.monotonic()
        for r in range(args.rounds):
            for inst in fleet:
                await inst.stop()
                await inst.start(bootstrap, src, dst, group)
                out.restarts += 1
                print(f"[{protocol}] round {r + 1}: instance {inst.index} restarted", flush=True)
                await settle(fleet, args.settle_s)
        out.restart_span_s = round(time.monotonic() - began, 1)
        done.set()
        out.records = await feeding
        fed = time.monotonic()

        async def caught_up() -> bool:
            return await committed(bootstrap, src, args.partitions, group) >= out.records

        while not await caught_up():
            for inst in fleet:
                inst.alive()
            if time.monotonic() - fed > args.timeout_s:
                raise SystemExit(f"[{protocol}] the group did not catch up in {args.timeout_s} s")
            await asyncio.sleep(0.5)
        out.catch_up_s = round(time.monotonic() - fed, 1)
    finally:
        done.set()
        for inst in fleet:
            with contextlib.suppress(SystemExit):
                await inst.stop()
        if not feeding.done():
            feeding.cancel()
    totals = sum((i.totals for i in fleet), Counter())
    out.redone = totals["eosflow_records_aborted"]
    out.committed_txns = totals['eosflow_transactions{outcome="committed"}']
    out.aborted_txns = {
        k.split('"')[1]: v
        for k, v in totals.items()
        if k.startswith("eosflow_transaction_aborts{") and v
    }
    everything = await read_topic(bootstrap, dst, committed_only=False)
    kept = await read_topic(bootstrap, dst)
    out.aborted_in_output = len(everything) - len(kept)
    report = await check_exactly_once(bootstrap, src, dst, group_id=group)
    out.exactly_once, out.check = report.ok, report.summary()
    return out


async def settle(fleet: list[Instance], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for inst in fleet:
            inst.alive()
        await asyncio.sleep(0.25)


async def until(check: object, fleet: list[Instance], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):  # type: ignore[arg-type]
        for inst in fleet:
            inst.alive()
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


async def main(args: argparse.Namespace) -> int:
    args.broker_config = KAFKA_DEFAULTS
    results: list[Outcome] = []
    async with broker(args) as (bootstrap, where, _version):
        for protocol in args.protocols.split(","):
            results.append(await one_protocol(bootstrap, protocol, args))
    print(
        f"\nrolling restart: {args.instances} instances, {args.partitions} partitions, "
        f"{args.rate:g} rec/s fed, {args.rounds} round(s), {args.settle_s:g} s between "
        f"restarts; {where}"
    )
    print(
        f"{'protocol':<9} {'records':>8} {'restarts':>8} {'redone':>7} {'aborted out':>11} "
        f"{'commits':>7}  aborts by reason            catch-up  exactly once"
    )
    for o in results:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(o.aborted_txns.items())) or "none"
        print(
            f"{o.protocol:<9} {o.records:>8,} {o.restarts:>8} {o.redone:>7,} "
            f"{o.aborted_in_output:>11,} {o.committed_txns:>7}  {reasons:<27} "
            f"{o.catch_up_s:>6.1f} s  {'yes' if o.exactly_once else 'NO: ' + o.check}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"rolling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(
        json.dumps(
            {
                "args": {k: v for k, v in vars(args).items()},
                "where": where,
                "results": [asdict(o) for o in results],
            },
            indent=2,
            default=str,
        )
    )
    print(f"results: {path}")
    return 0 if all(o.exactly_once for o in results) else 1


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks rolling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--broker", default="genuine", help="fake or genuine[:version]")
    p.add_argument("--protocols", default="classic,consumer")
    p.add_argument("--partitions", type=int, default=12)
    p.add_argument("--instances", type=int, default=3)
    p.add_argument("--rate", type=float, default=2000.0, help="records per second fed")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--settle-s", type=float, default=10.0)
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--broker-latency-ms", type=float, default=0.0)
    p.add_argument("--pin", action="store_true")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="an EosConfig setting for every instance (repeatable), e.g. post_commit_delay_s=0",
    )
    args = p.parse_args()
    try:
        args.settings = {
            f"EOSFLOW_{k.strip().upper()}": v.strip()
            for k, v in (item.split("=", 1) for item in args.set)
        }
    except ValueError:
        p.error("--set takes SETTING=VALUE")
    return args


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(parse())))
