"""The tables of ``compare.py``: throughput per contender with its spread, eosflow's ratio
to each contender measured in the same run (and in how many turns it was faster), the
broker's ceiling, latency, and the targets (reported, never failed on). Results of older
runs (one record count for all points) print too.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import textwrap
from pathlib import Path
from typing import Any

MEMORY_RECORDS = 1_000_000  # the memory target's record count
FLAT_MB, FLAT_FRACTION = 5.0, 0.10  # "flat": the peak at most this much above the RSS at 10%


def median_rate(runs: list[dict[str, Any]]) -> float:
    return float(statistics.median(r["rate"] for r in runs))


def budget_heading(result: dict[str, Any]) -> str:
    """The transaction budget of the run: one for all, and any contender given another
    by name (results before 2026-11-27 hold caps per contender, ``txn_records``, which
    gave the hand-written loops 1,000 records against eosflow's 20,000)."""
    if "budgets" not in result:
        caps = result["txn_records"]
        caps = caps if isinstance(caps, dict) else {"all": caps}
        return "transaction caps " + ", ".join(f"{n} {c}" for n, c in caps.items())
    budgets: dict[str, dict[str, Any]] = result["budgets"]
    common = statistics.mode(tuple(sorted(b.items())) for b in budgets.values())
    b = dict(common)
    cap = "no byte cap" if not b["bytes"] else f"{b['bytes'] / 1024 / 1024:g} MiB"
    text = (
        f"one transaction budget for every contender: {b['records']:,} records, {cap}, "
        f"{b['interval_s'] * 1000:g} ms, ended early once caught up and "
        f"{b['min_txn_s'] * 1000:g} ms old"
    )
    others = {n: o for n, o in budgets.items() if tuple(sorted(o.items())) != common}
    if others:
        text += " -- EXCEPT " + ", ".join(
            f"{n}: {o['records']:,} records" for n, o in others.items()
        )
    return text


def records_of(result: dict[str, Any], point: dict[str, Any]) -> int:
    """The records of a point's runs (older results: one count for the whole run)."""
    return int(point.get("records", result["records"]))


def _where(result: dict[str, Any], point: dict[str, Any]) -> str:
    return f"| {records_of(result, point):,} | {point['interval_s']:g} s | {point['partitions']} "


_RIVALS = (  # (contender, its name, eosflow's target ratio to it)
    ("kafka-streams", "Kafka Streams EOS v2", 1.0),
    ("librdkafka", "the librdkafka loop", 1.5),
    ("kafka-copier", "Kafka's TransactionalMessageCopier", 0.9),
)
P99_TARGET_MS = 50.0
_WHERE = "| records | commit interval | partitions "
_WHERE_RULE = "|---|---|---"


def print_table(result: dict[str, Any], names: list[str]) -> None:
    counts = result["records"] if isinstance(result["records"], list) else [result["records"]]
    print(
        f"\n{result['date']}, {result['machine']}, broker: {result['broker']}, "
        f"{' and '.join(f'{n:,}' for n in counts)} x {result['size']} B, "
        + budget_heading(result)
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
    print("\n| contender | latency p50 | latency p99 | p99 of each run | exactly once |")
    print("|---|---|---|---|---|")
    for n, lat in result["latency"].items():
        once = {True: "OK", False: "FAILED"}.get(lat.get("exactly_once"), "not checked")
        each = ", ".join(f"{r['p99_ms']:.0f}" for r in lat.get("runs", [lat]))
        print(f"| {n} | {lat['p50_ms']:.0f} ms | {lat['p99_ms']:.0f} ms | {each} ms | {once} |")
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
    """Kafka's own perf tools on the same broker, measured in the same turns, Kafka's own
    copier beside them when it ran, and each contender's median as a fraction of the
    ceiling (``_ceiling``)."""
    points = [p for p in result["throughput"] if p.get("ceiling")]
    if not points:
        return
    copier = "kafka-copier" in names
    print("\nThe broker's ceiling: Kafka's own perf tools, in the same turns (medians):\n")
    print(
        f"{_WHERE}| transactional produce (steady state) | read_committed consume | ceiling | "
        + ("Kafka's copier | " if copier else "")
        + " | ".join(f"{n} / ceiling" for n in names)
        + " |"
    )
    print(f"{_WHERE_RULE}|---|---|---|" + "---|" * (len(names) + copier))
    for point in points:
        c = point["ceiling"]
        top = statistics.median(r["rate"] for r in c)
        fractions = " | ".join(f"{median_rate(point['runs'][n]) / top:.0%}" for n in names)
        beside = f"{median_rate(point['runs']['kafka-copier']):,.0f} | " if copier else ""
        print(
            f"{_where(result, point)}| {statistics.median(r['produce'] for r in c):,.0f} "
            f"| {statistics.median(r['consume'] for r in c):,.0f} | {top:,.0f} | {beside}"
            f"{fractions} |"
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
        for n, what, target in _RIVALS:
            if n in names:
                ratio = median_rate(point["runs"]["eosflow"]) / median_rate(point["runs"][n])
                verdict = "yes" if ratio >= target else "NO"
                print(f"- eosflow >= {target:g}x {what} {at}: {verdict} ({ratio:.2f}x)")
        if point.get("ceiling"):
            top = statistics.median(r["rate"] for r in point["ceiling"])
            share = median_rate(point["runs"]["eosflow"]) / top
            verdict = "yes" if share >= 0.5 else "NO"
            print(f"- eosflow >= 50% of the broker's ceiling {at}: {verdict} ({share:.0%})")
    for n, what, target in _RIVALS:
        if n not in names:
            print(f"- eosflow >= {target:g}x {what}: not measured ({n} not run)")
    lat = result["latency"].get("eosflow")
    goal = f"p99 < {P99_TARGET_MS:g} ms at 2,000 rec/s, 100 ms commits"
    if lat is None:
        print(f"- {goal}: not measured (--latency-s 0)")
    else:
        rate = result.get("rate", 2000)
        at = "" if rate == 2000 else f" (measured at {rate:g} rec/s)"
        verdict = "yes" if lat["p99_ms"] < P99_TARGET_MS else "NO"
        print(f"- {goal}: {verdict} ({lat['p99_ms']:.0f} ms, p50 {lat['p50_ms']:.0f} ms){at}")
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
    """Median rec/s per contender: bars when the run measured one point (one record count,
    interval and partition count), else lines -- by commit interval when several were
    run, else by record count; the broker's ceiling, where measured, as a grey bar or a
    dashed line. Written to ``results/compare.png``."""
    if importlib.util.find_spec("matplotlib") is None:
        print("(no plot: matplotlib is not installed)")
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    points = result["throughput"]
    if len(points) == 1:
        _bars(ax, result, names, points[0])
    else:
        _lines(ax, result, names, points)
    budget = textwrap.fill(budget_heading(result).split(" -- ")[0], 90)
    ax.set_title(
        f"Exactly-once copy, {result['size']} B records ({result['date']})\n{budget}",
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(results / "compare.png", dpi=120)
    print(f"plot: {results / 'compare.png'}")


def _bars(ax: Any, result: dict[str, Any], names: list[str], point: dict[str, Any]) -> None:
    labels = list(names)
    heights = [median_rate(point["runs"][n]) for n in names]
    colors = [f"C{i}" for i in range(len(names))]
    if point.get("ceiling"):
        labels.append("broker ceiling")
        heights.append(statistics.median(r["rate"] for r in point["ceiling"]))
        colors.append("lightgrey")
    bars = ax.bar(labels, heights, color=colors)
    ax.bar_label(bars, labels=[f"{h / 1000:,.0f}k" for h in heights], fontsize=7)
    ax.set_ylabel("records/s (median)")
    ax.set_xlabel(
        f"{records_of(result, point):,} records, {point['interval_s']:g} s commits, "
        f"{point['partitions']} partitions"
    )
    ax.tick_params(axis="x", labelsize=7, labelrotation=20)


def _lines(ax: Any, result: dict[str, Any], names: list[str], points: list[dict[str, Any]]) -> None:
    import matplotlib.ticker

    by_interval = len({p["interval_s"] for p in points}) > 1
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
        tops = [
            statistics.median(r["rate"] for r in p["ceiling"]) for p in mine if p.get("ceiling")
        ]
        if len(tops) == len(mine):
            label = "broker ceiling (Kafka's perf tools)"
            ax.plot(xs, tops, linestyle="--", color="grey", marker="s", label=label)
    ax.set_xscale("log")
    ticks = sorted({x for x in xs})
    ax.set_xticks(ticks, labels=[f"{int(x):,}" if x >= 1 else f"{x:g}" for x in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("commit interval (s)" if by_interval else "records per run")
    ax.set_ylabel("records/s (median)")
    ax.legend(fontsize=7)


if __name__ == "__main__":  # the tables and the plot of a saved run, e.g. a reference file
    saved = json.loads(Path(sys.argv[1]).read_text())
    print_table(saved, saved["contenders"])
    plot(saved, saved["contenders"], Path(sys.argv[2]) if len(sys.argv) > 2 else Path("."))
