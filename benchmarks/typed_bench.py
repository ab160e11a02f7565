"""``python -m benchmarks typed``: typed records (issue 53), measured.

    .venv/bin/python -m benchmarks typed --broker genuine --records 1000000 --reps 3
    .venv/bin/python -m benchmarks typed --broker genuine --records 0   # codec costs alone

1. **Throughput**: an untimed warm-up turn of every contender over 20,000 records
   (``--no-warmup`` skips it), then contenders in turns, each turn starting one place
   further on (A B C, B C A, ... as ``python -m benchmarks run``), each in its own
   process, into a fresh output topic and group, with ``compare.py``'s one transaction
   budget (eosflow's defaults: 20,000 records, 2 MiB, 100 ms, ended early once caught up
   and 20 ms old; ``_budget``) and its one clock (the first record processed to the
   group's offsets committed at the end of the input; ``_clock``), the page cache
   written out before each run (``sync``). The input: ``--records`` ``Order``s (4
   fields, a list of 2 items; ``_typed_contenders.order``), keyed ``str(i)``, on
   ``--partitions`` partitions, seeded once per format: as JSON (~110 B), and in Avro
   in the Confluent wire format (~45 B, written by confluent-kafka's ``AvroSerializer``
   with the schema eosflow derives from ``Order``) through a genuine schema registry
   (the test kit's Apicurio 2.4.2, ``eosflow.testing.SchemaRegistry``). The contenders
   (``_typed_contenders``): ``eosflow-bytes`` (the pass-through of the JSON topic, the
   baseline), ``eosflow-json-model`` (``Topic(value=Order)`` in and out),
   ``quixstreams-json`` (its ``json`` serializers, exactly-once), ``eosflow-avro``
   (``eosflow.Avro(Order)`` in and out) and ``confluent-avro`` (the librdkafka loop of
   ``compare.py`` with confluent-kafka's ``AvroDeserializer``/``AvroSerializer``);
   ``eosflow-json-model-ahead`` and ``eosflow-avro-ahead`` (``process_ahead`` on) only
   when named. Beside each rate: the contender's CPU per record over the clock, how
   busy the machine was, peak RSS; for eosflow its transactions and commit steps.
2. **Every run is checked** before its rate counts: its output topic, read
   read_committed, holds exactly ``--records`` records, each input key once (none
   twice, none missing, no stray key), and each value decodes -- JSON with
   ``Order.model_validate_json``, Avro by its header's schema id fetched from the
   registry, fastavro, ``Order.model_validate`` -- to the very ``Order`` that key was
   seeded with; the group's committed offsets reached the end of the input (the clock
   waits for them). A run whose check fails is reported as FAILED, never with a rate.
3. **Codec costs per record**, in this process (``timeit``, the best of 7 rounds taken
   in turns, on one record): pydantic's own JSON calls; eosflow's ``Model(Order)``
   loads/dumps and its typed path per record (the decode wrapper, and an ``Output``'s
   whole way to bytes); eosflow's bound Avro codec and its typed path;
   confluent-kafka's ``AvroDeserializer``/``AvroSerializer`` (dicts, and with
   ``from_dict``/``to_dict`` to the same pydantic model); quixstreams'
   ``JSONDeserializer``/``JSONSerializer``; fastavro and pydantic alone.
4. ``--profile NAME ...``: each named contender once more, sampled by pyinstrument
   (not in the table; its output checked too), the report in
   ``benchmarks/results/typed-profile-NAME.txt``.

Targets (issue 53; reported, never failed on): eosflow-json-model >= 0.6x eosflow-bytes;
eosflow-json-model >= 3x quixstreams-json; eosflow-avro >= 1.5x confluent-avro. The
broker: as ``python -m benchmarks run`` (``--broker fake`` or ``genuine[:version]``).
Writes ``benchmarks/results/typed.json``; ``benchmarks/README.md`` has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from benchmarks._bench_broker import broker
from benchmarks._budget import Budget
from benchmarks._harness import RESULTS, create, settle
from benchmarks._typed_codecs import ROUNDS, codec_costs
from benchmarks._typed_contenders import (
    AHEAD,
    AVRO,
    CONTENDERS,
    Order,
    avro_schema_text,
    json_value,
    order,
)
from eosflow._checks._checker import read_records
from eosflow.testing import SchemaRegistry
from eosflow.testing._registry import call

TIMEOUT_S = 1800.0
SLICE = 100_000  # records seeded (and acknowledged) at a time
WARMUP_RECORDS = 20_000  # each contender's untimed first turn (compare.py's)
TARGETS = (  # (a, b, target ratio a / b)
    ("eosflow-json-model", "eosflow-bytes", 0.6),
    ("eosflow-json-model", "quixstreams-json", 3.0),
    ("eosflow-avro", "confluent-avro", 1.5),
    ("eosflow-json-dicts", "quixstreams-json", None),  # the same work: dicts, no validation
    ("eosflow-json-dicts", "eosflow-bytes", None),
    ("eosflow-avro", "confluent-avro-models", None),  # the same work: validated models
    ("eosflow-avro-dicts", "confluent-avro", None),  # the same work: dicts
    ("eosflow-avro", "eosflow-bytes", None),
    ("eosflow-json-model-ahead", "eosflow-json-model", None),  # what process_ahead buys
    ("eosflow-json-model-ahead", "eosflow-bytes", None),
    ("eosflow-avro-ahead", "eosflow-avro", None),
    ("eosflow-avro-ahead", "confluent-avro", None),
)


# -- the input ------------------------------------------------------------------------


async def seed(
    boot: str, topic: str, n: int, partitions: int, encode: Callable[[int], bytes]
) -> None:
    """``n`` records, the ``i``-th keyed ``str(i)`` on partition ``i % partitions``, its
    value ``encode(i)``; acknowledged a slice at a time (bounded memory), with progress."""
    print(f"  seeding {n:,} records into {topic} ...", flush=True)
    started = time.monotonic()
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    size = 0
    try:
        for lo in range(0, n, SLICE):
            futs = []
            for i in range(lo, min(n, lo + SLICE)):
                value = encode(i)
                size += len(value)
                futs.append(
                    await producer.send(topic, value, key=str(i).encode(), partition=i % partitions)
                )
            await asyncio.gather(*futs)
            done = min(n, lo + SLICE)
            print(f"    {done:,} of {n:,} seeded ({time.monotonic() - started:.0f} s)", flush=True)
    finally:
        await producer.stop()
    print(
        f"  seeded in {time.monotonic() - started:.1f} s, {size / n:.0f} B a value on average",
        flush=True,
    )


def avro_encoder(registry: str, topic: str) -> Callable[[int], bytes]:
    """confluent-kafka's ``AvroSerializer`` (its registry client, the derived schema
    registered under ``<topic>-value``): the registry's framing, written by a client
    other than eosflow."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(SchemaRegistryClient({"url": registry}), avro_schema_text())
    ctx = SerializationContext(topic, MessageField.VALUE)

    def encode(i: int) -> bytes:
        out = serialize(order(i).model_dump(), ctx)
        assert out is not None
        return out

    return encode


# -- the check ------------------------------------------------------------------------


class AvroReader:
    """Confluent-framed Avro bodies to ``Order``s: the header's schema id fetched from the
    registry once (plain HTTP), fastavro, ``Order.model_validate`` -- neither eosflow's
    codec nor confluent-kafka's, whose outputs it checks."""

    def __init__(self, registry: str) -> None:
        self.registry = registry
        self._schemas: dict[int, Any] = {}

    def __call__(self, data: bytes) -> Order:
        import fastavro

        if len(data) < 5 or data[0] != 0:
            raise ValueError("not in the Confluent wire format")
        schema_id = int.from_bytes(data[1:5], "big")
        parsed = self._schemas.get(schema_id)
        if parsed is None:
            status, body = call("GET", f"{self.registry}/schemas/ids/{schema_id}")
            if status != 200:
                raise ValueError(f"schema id {schema_id}: the registry answered {status}")
            parsed = fastavro.parse_schema(json.loads(body["schema"]), named_schemas={})
            self._schemas[schema_id] = parsed
        body = io.BytesIO(data)
        body.seek(5)
        return Order.model_validate(fastavro.schemaless_reader(body, parsed, None))


async def check(boot: str, dst: str, n: int, decode: Callable[[bytes], Order]) -> str:
    """'ok', or what is wrong with ``dst``'s committed records: each key ``0..n-1`` once,
    each value decoding to ``order(key)``."""
    seen = bytearray(n)
    twice = wrong = stray = total = 0
    for r in await read_records(boot, dst, timeout_s=600):
        total += 1
        try:
            i = int(r.key or b"")
        except ValueError:
            stray += 1
            continue
        if not 0 <= i < n:
            stray += 1
            continue
        twice += seen[i]
        seen[i] = 1
        try:
            ok = decode(r.value or b"") == order(i)
        except Exception:
            ok = False
        wrong += not ok
    missing = seen.count(0)
    if twice or wrong or stray or missing or total != n:
        return (
            f"{total:,} records: {twice:,} twice, {missing:,} missing, {stray:,} stray, "
            f"{wrong:,} not decoding to their Order"
        )
    return "ok"


# -- one run --------------------------------------------------------------------------


async def run_contender(
    name: str, cmd: list[str], n: int, timeout_s: float = TIMEOUT_S
) -> dict[str, Any]:
    """``_harness.run_contender`` with the contender's ``progress`` lines echoed as they
    come; killed by its pid on a timeout or an interruption."""
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    err = asyncio.ensure_future(proc.stderr.read())
    lines: list[str] = []
    started = time.monotonic()

    async def pump() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line.startswith("progress "):
                done, rss = line.split()[1:3]
                print(
                    f"    {name}: {int(done):,} of {n:,} records "
                    f"({time.monotonic() - started:.0f} s, RSS {rss} MiB)",
                    flush=True,
                )
            else:
                lines.append(line)
        await proc.wait()

    try:
        await asyncio.wait_for(pump(), timeout_s)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = (await err).decode(errors="replace")
    found = [ln for ln in lines if ln.startswith("{")]
    if proc.returncode != 0 or not found:
        tail = "\n".join(lines)[-2000:]
        raise RuntimeError(f"{name} failed ({proc.returncode}): {stderr[-2000:]}{tail}")
    result: dict[str, Any] = json.loads(found[-1])
    result["rate"] = n / result["seconds"]
    return result


def _machine_cpu() -> tuple[int, int]:
    """(busy, all) clock ticks of every core since boot (``/proc/stat``): over a run,
    how much of the machine's two cores was in use -- by the contender, the broker and
    the registry together."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


async def one_run(
    name: str,
    boot: str,
    src: str,
    n: int,
    args: argparse.Namespace,
    decode: Callable[[bytes], Order],
    profile: str | None = None,
) -> dict[str, Any]:
    """``name`` from ``src`` into a fresh topic and group, then its check."""
    run_id = uuid.uuid4().hex[:8]
    dst, group = f"typed-out-{name}-{run_id}", f"typed-g-{name}-{run_id}"
    await create(boot, (dst, args.partitions))
    await settle()
    budget = Budget.defaults()
    cmd = [sys.executable, "-m", "benchmarks._typed_contenders", name, boot, src, dst, str(n)]
    cmd += [group, args.registry_url, *budget.argv(), *([profile] if profile else [])]
    print(f"  {name}: {n:,} records from {src} ...", flush=True)
    before = _machine_cpu()
    try:
        r = await run_contender(name, cmd, n)
    except (RuntimeError, TimeoutError) as exc:
        first = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
        return {"contender": name, "check": f"did not finish: {first[0]}", "rate": None}
    busy, total = (a - b for a, b in zip(_machine_cpu(), before, strict=True))
    r["machine_busy"] = busy / total if total else 0.0
    r["cpu_us"] = r.get("cpu_s", 0.0) / n * 1e6
    print(f"  {name}: done in {r['seconds']:.1f} s; checking {dst} ...", flush=True)
    started = time.monotonic()
    r["check"] = await check(boot, dst, n, decode)
    r["check_s"] = time.monotonic() - started
    return r


# -- the run --------------------------------------------------------------------------


async def warm_up(
    boot: str, args: argparse.Namespace, registry: str, avro: Callable[[bytes], Order]
) -> None:
    """One untimed turn of every contender over ``WARMUP_RECORDS`` of topics seeded
    alike, before the first timed one, as ``compare.py``'s: on a fresh genuine broker the
    first transactional client pays for ``__transaction_state``, ``__consumer_offsets``
    and the broker's JIT. Checked too: a contender that cannot copy them right stops the
    benchmark here."""
    n = min(args.records, WARMUP_RECORDS)
    tag = uuid.uuid4().hex[:6]
    started = time.monotonic()
    sources: dict[str, str] = {}
    for fmt in sorted({"avro" if c in AVRO else "json" for c in args.contenders}):
        sources[fmt] = f"typed-warm-{fmt}-{tag}"
        await create(boot, (sources[fmt], args.partitions))
        encode = json_value if fmt == "json" else avro_encoder(registry, sources[fmt])
        await seed(boot, sources[fmt], n, args.partitions, encode)
    for name in args.contenders:
        src = sources["avro" if name in AVRO else "json"]
        decode = avro if name in AVRO else Order.model_validate_json
        r = await one_run(name, boot, src, n, args, decode)
        if r["check"] != "ok":
            raise SystemExit(f"warm-up: {name} failed: {r['check']}")
    print(f"warm-up turn ({n:,} records each, untimed): {time.monotonic() - started:.0f} s")


async def main(args: argparse.Namespace) -> int:
    RESULTS.mkdir(exist_ok=True)
    tag = uuid.uuid4().hex[:6]
    n = args.records
    out: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "versions": _versions(),
        "args": dict(vars(args)),
        "runs": [],
        "codecs": [],
        "profiles": {},
    }
    ok = True
    async with broker(args) as (boot, described, _version), SchemaRegistry() as registry:
        out["broker"] = described
        args.registry_url = registry.url
        out["registry"] = f"Apicurio Registry (test kit), {registry.url}"
        print(f"broker: {described}; schema registry at {registry.url}", flush=True)
        sources = {"json": f"typed-in-json-{tag}", "avro": f"typed-in-avro-{tag}"}
        if not n:  # the codec costs alone
            args.contenders, args.profile, args.reps, args.warmup = [], [], 0, False
        wanted = {"avro" if c in AVRO else "json" for c in args.contenders + args.profile}
        for fmt in sorted(wanted):
            await create(boot, (sources[fmt], args.partitions))
            encode = json_value if fmt == "json" else avro_encoder(registry.url, sources[fmt])
            await seed(boot, sources[fmt], n, args.partitions, encode)
        avro_reader = AvroReader(registry.url)
        if args.warmup:
            await warm_up(boot, args, registry.url, avro_reader)

        def source(name: str) -> tuple[str, Callable[[bytes], Order]]:
            if name in AVRO:
                return sources["avro"], avro_reader
            return sources["json"], Order.model_validate_json

        names = list(args.contenders)
        for rep in range(args.reps if names else 0):
            turn = names[rep % len(names) :] + names[: rep % len(names)]
            print(f"turn {rep + 1} of {args.reps}: {' '.join(turn)}", flush=True)
            for name in turn:
                src, decode = source(name)
                r = await one_run(name, boot, src, n, args, decode)
                r["rep"] = rep
                ok &= r["check"] == "ok"
                out["runs"].append(r)
                if r["check"] == "ok":
                    print(
                        f"  turn {rep + 1} {name}: {r['rate']:,.0f} rec/s, its CPU "
                        f"{r['cpu_us']:.1f} µs a record, machine {r['machine_busy']:.0%} busy, "
                        f"peak RSS {r['rss_peak_mb']:.0f} MiB, check ok ({r['check_s']:.0f} s)",
                        flush=True,
                    )
                else:
                    print(f"  turn {rep + 1} {name}: FAILED: {r['check']}", flush=True)
        if not args.no_codecs:
            print(f"codec costs, in-process (timeit, {args.codec_number:,} calls x {ROUNDS}) ...")
            out["codecs"] = await codec_costs(registry.url, args.codec_number)
        for name in args.profile:
            path = RESULTS / f"typed-profile-{name}.txt"
            src, decode = source(name)
            r = await one_run(name, boot, src, n, args, decode, profile=str(path))
            out["profiles"][name] = {**r, "path": str(path)}
            print(
                f"  profiled {name}: {r.get('rate') or 0:,.0f} rec/s under pyinstrument, "
                f"check {r['check']}; report in {path}",
                flush=True,
            )
    report(out, args)
    (RESULTS / "typed.json").write_text(json.dumps(out, indent=1))
    return 0 if ok else 1


def _versions() -> dict[str, str]:
    """The libraries measured, and the code (``git describe``)."""
    from importlib.metadata import version

    found = {m: version(m) for m in ("pydantic", "fastavro", "confluent-kafka", "quixstreams")}
    git = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
    )
    found["eosflow"] = git.stdout.strip() or "?"
    return found


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def report(out: dict[str, Any], args: argparse.Namespace) -> None:
    runs = out["runs"]
    if runs:
        print(
            f"\n{args.records:,} Orders (JSON ~110 B, Avro ~45 B), {args.partitions} "
            f"partitions, one budget ({Budget.defaults().describe()}), medians of "
            f"{args.reps} turn(s) (min-max); {out['broker']}; {out['registry']}; "
            f"{out['machine']}; {out['date']}; "
            + ", ".join(f"{k} {v}" for k, v in out["versions"].items())
            + "\n"
        )
        print(
            "| contender | rec/s | per turn | its CPU µs/record | machine busy | peak RSS MiB "
            "| checks |"
        )
        print("|---|---:|---|---:|---:|---:|---|")
        good: dict[str, list[dict[str, Any]]] = {}
        for name in args.contenders:
            mine = [r for r in runs if r["contender"] == name]
            failed = [r["check"] for r in mine if r["check"] != "ok"]
            if failed:  # a wrong output is never reported with a rate
                print(f"| {name} | FAILED | | | | | {'; '.join(sorted(set(failed)))} |")
                continue
            good[name] = mine
            rates = [r["rate"] for r in mine]
            turns = " / ".join(f"{x:,.0f}" for x in rates)
            rss = _median([r["rss_peak_mb"] for r in mine])
            cpu = _median([r["cpu_us"] for r in mine])
            busy = _median([r["machine_busy"] for r in mine])
            print(
                f"| {name} | {_median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) | "
                f"{turns} | {cpu:.1f} | {busy:.0%} | {rss:.0f} | all {len(mine)} ok |"
            )
        print()
        for a, b, target in TARGETS:
            if not (good.get(a) and good.get(b)):
                continue
            ratio = _median([r["rate"] for r in good[a]]) / _median([r["rate"] for r in good[b]])
            per_turn = ", ".join(
                f"{x['rate'] / y['rate']:.2f}" for x, y in zip(good[a], good[b], strict=False)
            )
            goal = ""
            if target is not None:
                goal = f"; target >= {target:g}x: {'met' if ratio >= target else 'MISSED'}"
            print(f"{a} / {b}: {ratio:.2f}x (per turn {per_turn}){goal}")
    eos = [r for r in runs if r["check"] == "ok" and "commits" in r]
    if eos:
        print(
            "\n| eosflow run | rec/s | transactions | records a txn | commit steps, ms a txn "
            "(flush / offsets / heartbeat / end_txn) | commit steps' share of the clock | "
            "its CPU's share of the clock | dropped ahead |"
        )
        print("|---|---:|---:|---:|---|---:|---:|---:|")
        for r in eos:
            txns = max(r["commits"], 1)
            steps = [r.get(f"{p}_s", 0.0) for p in ("flush", "offsets", "heartbeat", "end_txn")]
            print(
                f"| {r['contender']} turn {r['rep'] + 1} | {r['rate']:,.0f} | {r['commits']} | "
                f"{r['records'] / txns:,.0f} | "
                + " / ".join(f"{x / txns * 1000:.1f}" for x in steps)
                + f" | {sum(steps) / r['seconds']:.0%} | {r['cpu_s'] / r['seconds']:.0%} | "
                f"{r.get('dropped_ahead', 0):,} |"
            )
    if out["codecs"]:
        print("\n| codec, one Order | µs per call |")
        print("|---|---:|")
        for what, us in out["codecs"]:
            print(f"| {what} | {us:.2f} |")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", default="fake", help="fake, or genuine[:version]")
    ap.add_argument("--records", type=int, default=1_000_000, help="0: the codec costs alone")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--reps", type=int, default=1, help="turns of every contender")
    ap.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS + AHEAD)
    ap.add_argument(
        "--profile",
        nargs="+",
        default=[],
        choices=CONTENDERS + AHEAD,
        help="runs under pyinstrument",
    )
    ap.add_argument(
        "--no-warmup", dest="warmup", action="store_false", help="skip the untimed first turn"
    )
    ap.add_argument("--no-codecs", action="store_true", help="skip the in-process codec costs")
    ap.add_argument("--codec-number", type=int, default=20_000, help="calls per timeit repeat")
    args = ap.parse_args(argv)
    args.broker_latency_ms, args.pin = 0.0, False  # the broker's options, unused here
    args.registry_url = ""
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
