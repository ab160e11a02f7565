"""The tables of ``compare.py``: throughput per contender with its spread, eosflow's ratio
to each contender measured in the same run (and in how many turns it was faster), the
broker's ceiling, latency, and the targets (reported, never failed on). Results of older
runs (one record count for all points) print too.
"""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path
from typing import Any

MEMORY_RECORDS = 1_000_000  # the memory target's record count
FLAT_MB, FLAT_FRACTION = 5.0, 0.10  # "flat": the peak at most this much above the RSS at 10%


def median_rate(runs: list[dict[str, Any]]) -> float:
    return float(statistics.median(r["rate"] for r in runs))


def _caps(result: dict[str, Any]) -> dict[str, Any]:
    """Each contender's transaction cap (older results hold one number for all)."""
    caps = result["txn_records"]
    return caps if isinstance(caps, dict) else {"all": caps}


def records_of(result: dict[str, Any], point: dict[str, Any]) -> int:
    """The records of a point's runs (older results: one count for the whole run)."""
    return int(point.get("records", result["records"]))


def _where(result: dict[str, Any], point: dict[str, Any]) -> str:
    return f"| {records_of(result, point):,} | {point['interval_s']:g} s | {point['partitions']} "


_RIVALS = (("kafka-streams", "Kafka Streams EOS v2"), ("librdkafka", "the librdkafka loop"))
_WHERE = "| records | commit interval | partitions "
_WHERE_RULE = "|---|---|---"


def print_table(result: dict[str, Any], names: list[str]) -> None:
    counts = result["records"] if isinstance(result["records"], list) else [result["records"]]
    print(
        f"\n{result['date']}, {result['machine']}, broker: {result['broker']}, "
        f"{' and '.join(f'{n:,}' for n in counts)} x {result['size']} B, transaction caps "
        + ", ".join(f"{n} {c}" for n, c in _caps(result).items())
        + ", "
        + (
            f"{result['work_rounds']} SHA-256 rounds of work per record\n"
            if result.get("work_rounds")
            else "pass-through\n"
        )
    )
    if "kafka-streams" in names:
        print(f"Kafka Streams {result['kafka_streams_version']} (exactly_once_v2)\n")
    print(f"{_WHERE}| contender | median rec/s | min-max | vs aiokafka | peak RSS | exactly once |")
    print(f"{_WHERE_RULE}|---|---|---|---|---|---|")
    for point in result["throughput"]:
        med = {n: median_rate(point["runs"][n]) for n in names}
        for n in names:
            runs = point["runs"][n]
            rss = max(r["rss_peak_mb"] for r in runs)
            rates = [r["rate"] for r in runs]
            checked = [r["exactly_once"] for r in runs if "exactly_once" in r]
            once = "not checked" if not checked else f"{sum(checked)}/{len(checked)} OK"
            print(
                f"{_where(result, point)}| {n} | {med[n]:,.0f} | "
                f"{min(rates):,.0f}-{max(rates):,.0f} | "
                f"{med[n] / med['aiokafka']:.2f}x | {rss:.0f} MiB | {once} |"
            )
    print_ratios(result, names)
    print_ceiling(result, names)
    print("\n| contender | latency p50 | latency p99 | exactly once |")
    print("|---|---|---|---|")
    for n, lat in result["latency"].items():
        once = {True: "OK", False: "FAILED"}.get(lat.get("exactly_once"), "not checked")
        print(f"| {n} | {lat['p50_ms']:.0f} ms | {lat['p99_ms']:.0f} ms | {once} |")
    print_targets(result, names)


def print_ratios(result: dict[str, Any], names: list[str]) -> None:
    """eosflow's median over each contender's, both from this run, and in how many turns
    (the runs made one after the other) eosflow was the faster, with the spread of the
    per-turn ratios."""
    if "eosflow" not in names:
        return
    print("\neosflow against each contender, measured in this run (ratio of medians):\n")
    print(f"{_WHERE}| eosflow vs | ratio | per turn | turns eosflow faster |")
    print(f"{_WHERE_RULE}|---|---|---|---|")
    for point in result["throughput"]:
        mine = point["runs"]["eosflow"]
        for n in names:
            if n == "eosflow":
                continue
            theirs = point["runs"][n]
            turns = [a["rate"] / b["rate"] for a, b in zip(mine, theirs, strict=True)]
            wins = sum(t > 1 for t in turns)
            print(
                f"{_where(result, point)}| {n} | "
                f"{median_rate(mine) / median_rate(theirs):.2f}x | "
                f"{min(turns):.2f}-{max(turns):.2f} | {wins} of {len(mine)} |"
            )


def print_ceiling(result: dict[str, Any], names: list[str]) -> None:
    """Kafka's own perf tools on the same broker, measured in the same turns, and each
    contender's median as a fraction of that ceiling (``_ceiling``)."""
    points = [p for p in result["throughput"] if p.get("ceiling")]
    if not points:
        return
    print("\nThe broker's ceiling: Kafka's own perf tools, in the same turns (medians):\n")
    print(
        f"{_WHERE}| transactional produce | read_committed consume | ceiling | "
        + " | ".join(f"{n} / ceiling" for n in names)
        + " |"
    )
    print(f"{_WHERE_RULE}|---|---|---|" + "---|" * len(names))
    for point in points:
        c = point["ceiling"]
        top = statistics.median(r["rate"] for r in c)
        fractions = " | ".join(f"{median_rate(point['runs'][n]) / top:.0%}" for n in names)
        print(
            f"{_where(result, point)}| {statistics.median(r['produce'] for r in c):,.0f} "
            f"| {statistics.median(r['consume'] for r in c):,.0f} | {top:,.0f} | {fractions} |"
        )


def print_targets(result: dict[str, Any], names: list[str]) -> None:
    if "eosflow" not in names:
        return
    print("\nTargets (reported, not failed on):")
    for point in result["throughput"]:
        at = (
            f"({records_of(result, point):,} records, {point['interval_s']:g} s commits, "
            f"{point['partitions']} partitions)"
        )
        for n, what in _RIVALS:
            if n in names:
                ratio = median_rate(point["runs"]["eosflow"]) / median_rate(point["runs"][n])
                verdict = "yes" if ratio >= 1 else "NO"
                print(f"- eosflow >= {what} {at}: {verdict} ({ratio:.2f}x)")
        if point.get("ceiling"):
            top = statistics.median(r["rate"] for r in point["ceiling"])
            share = median_rate(point["runs"]["eosflow"]) / top
            verdict = "yes" if share >= 0.5 else "NO"
            print(f"- eosflow >= 50% of the broker's ceiling {at}: {verdict} ({share:.0%})")
    if "kafka-streams" not in names:
        print("- eosflow >= Kafka Streams EOS v2: not measured (kafka-streams not run)")
    lat = result["latency"].get("eosflow")
    if lat is None:
        print("- p99 < 100 ms at 2,000 rec/s, 100 ms commits: not measured (--latency-s 0)")
    else:
        rate = result.get("rate", 2000)
        at = "" if rate == 2000 else f" (measured at {rate:g} rec/s)"
        verdict = "yes" if lat["p99_ms"] < 100 else "NO"
        print(
            f"- p99 < 100 ms at 2,000 rec/s, 100 ms commits: {verdict} ({lat['p99_ms']:.0f} ms, "
            f"p50 {lat['p50_ms']:.0f} ms){at}"
        )
    _print_memory(result)


def _print_memory(result: dict[str, Any]) -> None:
    """Memory flat: in each eosflow run of the largest record count, its final peak RSS
    against its peak RSS once a tenth of the records were processed; the run that grew
    most is reported. (Reference files before 2026-11-26 hold only the current RSS at the
    tenth, ``rss_tenth_mb``, which is used for them.)"""
    largest = max(records_of(result, p) for p in result["throughput"])
    points = [p for p in result["throughput"] if records_of(result, p) == largest]
    runs = [
        r
        for p in points
        for r in p["runs"].get("eosflow", [])
        if "hwm_tenth_mb" in r or "rss_tenth_mb" in r
    ]
    if not runs:
        return
    key = "hwm_tenth_mb" if all("hwm_tenth_mb" in r for r in runs) else "rss_tenth_mb"
    worst = max(runs, key=lambda r: r["rss_peak_mb"] - r[key])
    tenth, peak = worst[key], worst["rss_peak_mb"]
    flat = peak - tenth <= max(FLAT_MB, FLAT_FRACTION * tenth)
    note = (
        ""
        if largest >= MEMORY_RECORDS
        else f"; only {largest:,} records: --records {MEMORY_RECORDS} judges it"
    )
    what = "peak RSS" if key == "hwm_tenth_mb" else "RSS"
    print(
        f"- memory flat over {MEMORY_RECORDS:,} records: {'yes' if flat else 'NO'} "
        f"(the eosflow run that grew most: {what} {tenth:.0f} MiB after a tenth of the "
        f"records, peak {peak:.0f} MiB at the end; flat: at most {FLAT_MB:g} MiB or "
        f"{FLAT_FRACTION:.0%} more{note}; current RSS at a tenth: "
        + ", ".join(f"{r.get('rss_tenth_mb', 0):.0f}" for r in runs)
        + " MiB)"
    )


def plot(result: dict[str, Any], names: list[str], results: Path) -> None:
    """Median rec/s per contender: by commit interval when several were run, else by
    record count (the broker's ceiling drawn as a line where measured)."""
    if importlib.util.find_spec("matplotlib") is None:
        print("(no plot: matplotlib is not installed)")
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = result["throughput"]
    by_interval = len({p["interval_s"] for p in points}) > 1
    fig, ax = plt.subplots(figsize=(7, 4))
    groups = sorted({(records_of(result, p), p["partitions"]) for p in points})
    for records, partitions in groups if by_interval else [(None, None)]:
        mine = [
            p
            for p in points
            if not by_interval or (records_of(result, p), p["partitions"]) == (records, partitions)
        ]
        xs = [p["interval_s"] if by_interval else records_of(result, p) for p in mine]
        for n in names:
            ys = [median_rate(p["runs"][n]) for p in mine]
            label = f"{n} ({records:,} records, {partitions} partitions)" if by_interval else n
            ax.plot(xs, ys, marker="o", label=label)
        if any(p.get("ceiling") for p in mine):
            tops = [
                statistics.median(r["rate"] for r in p.get("ceiling") or [{"rate": 0}])
                for p in mine
            ]
            ax.plot(
                xs, tops, linestyle="--", color="grey", label="broker ceiling (Kafka's perf tools)"
            )
    ax.set_xscale("log")
    ax.set_xlabel("commit interval (s)" if by_interval else "records per run")
    ax.set_ylabel("records/s (median)")
    ax.set_title(f"Exactly-once copy, {result['size']} B records ({result['date']})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(results / "compare.png", dpi=120)
    print(f"plot: {results / 'compare.png'}")
