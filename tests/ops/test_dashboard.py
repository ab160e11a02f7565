"""The Grafana dashboard in examples/ parses and names only metrics the app exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from eosflow._ops._metrics import PrometheusMetrics

DASHBOARD = Path(__file__).parents[2] / "examples" / "grafana-dashboard.json"


def exported() -> tuple[set[str], set[str]]:
    """The sample names the app's metrics expose (labelled or not), and their families."""
    families = [f for f in PrometheusMetrics().registry.collect() if f.name.startswith("eosflow_")]
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
    samples = {f.name + s for f in families for s in suffixes[f.type]}
    return samples, {f.name for f in families}


def test_the_dashboard_names_only_exported_metrics() -> None:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    assert exprs, "no queries"
    named = {m for e in exprs for m in re.findall(r"\beosflow_[a-z_]+", e)}
    process = {m for e in exprs for m in re.findall(r"\bprocess_[a-z_]+", e)}
    own = {s.name for f in PrometheusMetrics().registry.collect() for s in f.samples}
    assert process and process <= own, "the process collector's metrics are served too"
    samples, families = exported()
    assert named - samples == set(), "queries name metrics the app does not export"
    # and every family is on the dashboard, so a new metric gets a panel
    shown = {f for f in families if any(n == f or n.startswith(f + "_") for n in named)}
    assert shown == families
