// eosflow's console, an app's page: asks the app for /console/snapshot.json once a
// second and draws it (common.js: the charts).
"use strict";

const EVERY_MS = 1000;
const MARK_COLOURS = { assigned: "#067647", revoked: "#bf8700" };
const PHASE_COLOURS = { flush: "#1f6feb", offsets: "#8250df", heartbeat: "#bf8700", end_txn: "#cf222e" };

function render(s) {
  $("group").textContent = s.about.group || "app";
  const inputs = (s.about.inputs || []).join(", ");
  $("about").textContent = `group ${s.about.group} \u00b7 reading ${inputs} \u00b7 up since ${clock(s.started)}`;
  const recent = lastSeconds(s.series, 10);
  const secs = Math.max(1, recent.length);
  const records = recent.reduce((a, p) => a + p.records, 0);
  const commits = recent.reduce((a, p) => a + p.committed, 0);
  $("fig-records").textContent = fmt(records / secs);
  $("fig-commits").textContent = fmt(commits / secs, 1);
  $("fig-commit-ms").textContent = fmt(s.commit_p50_ms, 1);
  const lags = s.partitions.map((p) => p.lag).filter((v) => v !== null);
  $("fig-lag").textContent = lags.length ? fmt(lags.reduce((a, v) => a + v, 0)) : "\u2013";
  $("fig-not-committed").textContent = fmt(s.totals.not_committed);
  $("fig-dead").textContent = fmt(s.totals.dead_lettered);
  $("fig-records").dataset.total = String(s.totals.records);

  const times = s.series.map((p) => p.t);
  drawChart($("chart-records"), times, [
    { label: "records committed", colour: "#1f6feb", values: s.series.map((p) => p.records) },
    { label: "dead-lettered", colour: "#cf222e", values: s.series.map((p) => p.dead_lettered) },
  ], "records / s");
  // rebalances on the timeline: partitions assigned (green) and revoked (amber)
  const marks = s.events.filter((e) => e.kind in MARK_COLOURS)
    .map((e) => ({ t: e.at, colour: MARK_COLOURS[e.kind] }));
  drawChart($("chart-transactions"), times, [
    { label: "committed", colour: "#067647", values: s.series.map((p) => p.committed) },
    { label: "not committed", colour: "#cf222e", values: s.series.map((p) => p.not_committed) },
  ], "transactions / s", marks);
  drawChart($("chart-phases"), times, Object.keys(PHASE_COLOURS).map((name) => ({
    label: name, colour: PHASE_COLOURS[name], values: s.series.map((p) => p.phases_ms[name]),
  })), "ms");

  $("spark-part").hidden = !s.totals.spark_jobs;  // an app without Spark: no chart
  if (s.totals.spark_jobs) {
    drawChart($("chart-spark"), times, [
      { label: "longest Spark job", colour: "#e8590c", values: s.series.map((p) => p.spark_max_s) },
    ], "s");
  }

  $("partitions").tBodies[0].replaceChildren(...(s.partitions.length
    ? s.partitions.map((p) => row([[p.topic, ""], [String(p.partition), "num"],
      [fmt(p.committed), "num"], [fmt(p.position), "num"], [fmt(p.last_stable), "num"],
      [fmt(p.lag), "num"]]))
    : [row([["none held", ""]])]));

  $("restoring-part").hidden = s.restoring.length === 0;  // nothing restores
  $("restoring").tBodies[0].replaceChildren(...s.restoring.map((r) => row([[r.topic, ""],
    [String(r.partition), "num"], [r.store, ""], [fmt(r.applied), "num"], [fmt(r.towards), "num"],
    [fmt(r.seconds, 1), "num"]])));
  $("stores-part").hidden = s.stores.length === 0;  // a stateless app
  $("stores").tBodies[0].replaceChildren(...s.stores.map((t) => row([[t.store, ""], [t.topic, ""],
    [t.partition < 0 ? "all" : String(t.partition), "num"], [fmt(t.keys), "num"], [bytes(t.bytes), "num"],
    [fmt(t.windows), "num"], [eventTime(t.oldest_ms), "num"], [eventTime(t.stream_time_ms), "num"]])));
  $("late-part").hidden = s.late.length === 0;  // no window has left a record out
  $("late").tBodies[0].replaceChildren(...s.late.map((w) => row([[w.window, ""], [fmt(w.records), "num"]])));

  const stages = s.about.stages || [];
  $("stages-part").hidden = stages.length === 0;  // one processor: no stages to show
  if (stages.length && $("pipeline").dataset.drawn !== "yes") drawPipeline($("pipeline"), stages);
  $("stages").replaceChildren(...stages.map((st) => {
    const li = document.createElement("li");
    li.textContent = `${st.name}: reads ${st.reads.join(", ")}`;
    return li;
  }));

  $("events").replaceChildren(...s.events.slice().reverse().map((e) => {
    const li = document.createElement("li");
    li.className = e.kind;
    const when = document.createElement("time"); when.textContent = clock(e.at);
    const kind = document.createElement("span"); kind.className = "kind"; kind.textContent = e.kind;
    li.append(when, kind, document.createTextNode(e.text));
    return li;
  }));
}

// The pipeline's graph, drawn once: its source topics in the first column, then each
// stage one column right of the furthest stage it reads; an arrow per input (a stage's
// regrouped records: from that stage, through its repartition topic).
function drawPipeline(svg, stages) {
  const NS = "http://www.w3.org/2000/svg";
  const W = 150, H = 34, DX = 200, DY = 56;
  const writer = {};  // repartition topic -> the stage writing it
  for (const st of stages) if (st.regroups_to) writer[st.regroups_to] = st.name;
  const column = {}, nodes = [], edges = [];
  const sources = [...new Set(stages.flatMap((st) => st.reads.filter((t) => !(t in writer))))];
  sources.forEach((t) => { column["topic:" + t] = 0; nodes.push({ id: "topic:" + t, label: t, kind: "topic" }); });
  for (const st of stages) {  // in the graph's order: what a stage reads is placed before it
    const from = st.reads.map((t) => (t in writer ? "stage:" + writer[t] : "topic:" + t));
    column["stage:" + st.name] = 1 + Math.max(...from.map((f) => column[f] ?? 0));
    nodes.push({ id: "stage:" + st.name, label: st.name, kind: "stage" });
    from.forEach((f) => edges.push({ from: f, to: "stage:" + st.name }));
  }
  const rows = {}, at = {};
  for (const n of nodes) {
    const c = column[n.id];
    rows[c] = (rows[c] || 0) + 1;
    at[n.id] = { x: 8 + c * DX, y: 8 + (rows[c] - 1) * DY };
  }
  svg.setAttribute("width", String(16 + W + DX * Math.max(...Object.values(column))));
  svg.setAttribute("height", String(16 + H + DY * (Math.max(...Object.values(rows)) - 1)));
  const make = (tag, attrs) => {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    return el;
  };
  const marker = make("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto" });
  marker.append(make("path", { d: "M0,0 L10,5 L0,10 z", fill: "#5b6573" }));
  const defs = make("defs", {}); defs.append(marker); svg.append(defs);
  for (const e of edges) {
    const a = at[e.from], b = at[e.to];
    svg.append(make("line", { x1: a.x + W, y1: a.y + H / 2, x2: b.x, y2: b.y + H / 2,
      stroke: "#5b6573", "marker-end": "url(#arrow)", "data-edge": `${e.from} -> ${e.to}` }));
  }
  for (const n of nodes) {
    const g = make("g", { "data-node": n.id, class: n.kind });
    g.append(make("rect", { x: at[n.id].x, y: at[n.id].y, width: W, height: H, rx: n.kind === "stage" ? 6 : 16 }));
    const label = make("text", { x: at[n.id].x + W / 2, y: at[n.id].y + H / 2 + 5, "text-anchor": "middle" });
    label.textContent = n.label.length > 22 ? n.label.slice(0, 21) + "\u2026" : n.label;
    const title = make("title", {}); title.textContent = n.label;
    g.append(title, label);
    svg.append(g);
  }
  svg.dataset.nodes = String(nodes.length);
  svg.dataset.edges = String(edges.length);
  svg.dataset.drawn = "yes";
}

async function lookUp(store, key) {
  const out = $("lookup-result");
  out.textContent = "asking\u2026";
  delete out.dataset.status;
  let answer, text;
  try {
    answer = await fetch(`/state/${encodeURIComponent(store)}/${encodeURIComponent(key)}`,
      { signal: AbortSignal.timeout(5000) });
    text = await answer.text();
  } catch (err) {
    out.textContent = `no answer from the app (${err.message})`;
    return;
  }
  let shown = text;
  try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* as sent */ }
  out.textContent = `HTTP ${answer.status}\n${shown}`;
  out.dataset.status = String(answer.status);
}

$("lookup").addEventListener("submit", (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  lookUp(form.get("store"), form.get("key") || "");
});

// ?store=...&key=... looks the key up as the page opens (a link to a lookup)
const asked = new URLSearchParams(location.search);
if (asked.get("store")) {
  $("lookup").elements.store.value = asked.get("store");
  $("lookup").elements.key.value = asked.get("key") || "";
  lookUp(asked.get("store"), asked.get("key") || "");
}

poll("/console/snapshot.json", EVERY_MS, 3000, render,
  (s) => `updated ${clock(s.now)}, every ${EVERY_MS / 1000} s`, "the app");
