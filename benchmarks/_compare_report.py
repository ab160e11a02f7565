"""The tables of ``compare.py``: throughput per contender, eosflow's ratio to each
contender measured in the same run, latency, and the targets (reported, never failed on).
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


def print_table(result: dict[str, Any], names: list[str]) -> None:
    print(
        f"\n{result['date']}, {result['machine']}, broker: {result['broker']}, "
        f"{result['records']:,} x {result['size']} B, transaction caps "
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
    print(
        "| commit interval | partitions | contender | median rec/s | vs aiokafka | peak RSS "
        "| exactly once |"
    )
    print("|---|---|---|---|---|---|---|")
    for point in result["throughput"]:
        med = {n: median_rate(point["runs"][n]) for n in names}
        for n in names:
            runs = point["runs"][n]
            rss = max(r["rss_peak_mb"] for r in runs)
            checked = [r["exactly_once"] for r in runs if "exactly_once" in r]
            once = "not checked" if not checked else f"{sum(checked)}/{len(checked)} OK"
            print(
                f"| {point['interval_s']:g} s | {point['partitions']} | {n} | {med[n]:,.0f} | "
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
    (the runs made one after the other) eosflow was the faster."""
    if "eosflow" not in names:
        return
    print("\neosflow against each contender, measured in this run (ratio of medians):\n")
    print("| commit interval | partitions | eosflow vs | ratio | turns eosflow faster |")
    print("|---|---|---|---|---|")
    for point in result["throughput"]:
        mine = point["runs"]["eosflow"]
        for n in names:
            if n == "eosflow":
                continue
            theirs = point["runs"][n]
            wins = sum(a["rate"] > b["rate"] for a, b in zip(mine, theirs, strict=True))
            print(
                f"| {point['interval_s']:g} s | {point['partitions']} | {n} | "
                f"{median_rate(mine) / median_rate(theirs):.2f}x | {wins} of {len(mine)} |"
            )


def print_ceiling(result: dict[str, Any], names: list[str]) -> None:
    """Kafka's own perf tools on the same broker, measured in the same turns, and each
    contender's median as a fraction of that ceiling (``_ceiling``)."""
    points = [p for p in result["throughput"] if p.get("ceiling")]
    if not points:
        return
    print("\nThe broker's ceiling: Kafka's own perf tools, in the same turns (medians):\n")
    print("| commit interval | partitions | transactional produce | read_committed consume "
          "| ceiling | " + " | ".join(f"{n} / ceiling" for n in names) + " |")  # fmt: skip
    print("|---|---|---|---|---|" + "---|" * len(names))
    for point in points:
        c = point["ceiling"]
        top = statistics.median(r["rate"] for r in c)
        fractions = " | ".join(f"{median_rate(point['runs'][n]) / top:.0%}" for n in names)
        print(
            f"| {point['interval_s']:g} s | {point['partitions']} "
            f"| {statistics.median(r['produce'] for r in c):,.0f} "
            f"| {statistics.median(r['consume'] for r in c):,.0f} | {top:,.0f} | {fractions} |"
        )


def print_targets(result: dict[str, Any], names: list[str]) -> None:
    if "eosflow" not in names:
        return
    print("\nTargets (reported, not failed on):")
    if "kafka-streams" in names:
        for point in result["throughput"]:
            ratio = median_rate(point["runs"]["eosflow"]) / median_rate(
                point["runs"]["kafka-streams"]
            )
            print(
                f"- eosflow >= Kafka Streams EOS v2 ({point['interval_s']:g} s commits, "
                f"{point['partitions']} partitions): {'yes' if ratio >= 1 else 'NO'} "
                f"({ratio:.2f}x)"
            )
    else:
        print("- eosflow >= Kafka Streams EOS v2: not measured (kafka-streams not run)")
    for point in result["throughput"]:
        at = f"({point['interval_s']:g} s commits, {point['partitions']} partitions)"
        if "librdkafka" in names:
            ratio = median_rate(point["runs"]["eosflow"]) / median_rate(point["runs"]["librdkafka"])
            verdict = "yes" if ratio >= 1 else "NO"
            print(f"- eosflow >= the librdkafka loop {at}: {verdict} ({ratio:.2f}x)")
        if point.get("ceiling"):
            top = statistics.median(r["rate"] for r in point["ceiling"])
            share = median_rate(point["runs"]["eosflow"]) / top
            verdict = "yes" if share >= 0.5 else "NO"
            print(f"- eosflow >= 50% of the broker's ceiling {at}: {verdict} ({share:.0%})")
    lat = result["latency"].get("eosflow")
    if lat is None:
        print("- p99 < 100 ms at 2,000 rec/s, 100 ms commits: not measured (--latency-s 0)")
    else:
        at = "" if result["rate"] == 2000 else f" (measured at {result['rate']:g} rec/s)"
        verdict = "yes" if lat["p99_ms"] < 100 else "NO"
        print(
            f"- p99 < 100 ms at 2,000 rec/s, 100 ms commits: {verdict} ({lat['p99_ms']:.0f} ms){at}"
        )
    runs = [r for p in result["throughput"] for r in p["runs"]["eosflow"] if "rss_tenth_mb" in r]
    if runs:
        peak = max(r["rss_peak_mb"] for r in runs)
        tenth = min(r["rss_tenth_mb"] for r in runs)
        flat = peak - tenth <= max(FLAT_MB, FLAT_FRACTION * tenth)
        note = (
            ""
            if result["records"] >= MEMORY_RECORDS
            else f"; only {result['records']:,} records: --records {MEMORY_RECORDS} judges it"
        )
        print(
            f"- memory flat over {MEMORY_RECORDS:,} records: {'yes' if flat else 'NO'} "
            f"(eosflow's RSS {tenth:.0f} MiB after a tenth of the records, peak "
            f"{peak:.0f} MiB; flat: at most {FLAT_MB:g} MiB or {FLAT_FRACTION:.0%} more{note})"
        )


def plot(result: dict[str, Any], names: list[str], results: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        print("(no plot: matplotlib is not installed)")
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for partitions in sorted({p["partitions"] for p in result["throughput"]}):
        points = [p for p in result["throughput"] if p["partitions"] == partitions]
        for n in names:
            xs = [p["interval_s"] for p in points]
            ys = [median_rate(p["runs"][n]) for p in points]
            ax.plot(xs, ys, marker="o", label=f"{n} ({partitions} partitions)")
    ax.set_xscale("log")
    ax.set_xlabel("commit interval (s)")
    ax.set_ylabel("records/s (median)")
    ax.set_title(
        f"Exactly-once copy, {result['records']:,} x {result['size']} B ({result['date']})"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(results / "compare.png", dpi=120)
    print(f"plot: {results / 'compare.png'}")
