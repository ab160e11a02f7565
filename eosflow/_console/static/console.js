// eosflow's console: asks the app for /console/snapshot.json once a second and draws it.
// No framework and no build step: what the browser has.
"use strict";

const EVERY_MS = 1000;
const PHASE_COLOURS = { flush: "#1f6feb", offsets: "#8250df", heartbeat: "#bf8700", end_txn: "#cf222e" };
const $ = (id) => document.getElementById(id);

function fmt(n, digits = 0) {
  if (n === null || n === undefined || Number.isNaN(n)) return "\u2013";
  return n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString("en-GB", { hour12: false });
}

// A 1-2-5 step giving about `ticks` intervals up to `max`.
function niceStep(max, ticks) {
  const raw = max / ticks;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (raw <= m * power) return m * power;
  return 10 * power;
}

// Lines over time with a y axis in `unit` and an x axis in minutes before now.
function drawChart(canvas, times, series, unit) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  const left = 56, right = 10, top = 22, bottom = 28;
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui, sans-serif";
  let max = 0;
  for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
  const step = niceStep(max > 0 ? max : 1, 4);
  const top_value = Math.max(step, Math.ceil(max / step) * step);
  const y = (v) => top + (h - top - bottom) * (1 - v / top_value);
  const n = times.length;
  const span = Math.max(60, n);
  const x = (i) => left + (w - left - right) * ((span - n + i) / Math.max(1, span - 1));
  // the y axis: gridlines and labels in the unit
  ctx.strokeStyle = "#d6dbe1"; ctx.fillStyle = "#5b6573"; ctx.lineWidth = 1;
  ctx.textAlign = "right"; ctx.textBaseline = "middle";
  for (let v = 0; v <= top_value + 1e-9; v += step) {
    ctx.beginPath(); ctx.moveTo(left, y(v)); ctx.lineTo(w - right, y(v)); ctx.stroke();
    ctx.fillText(fmt(v, step < 1 ? 2 : 0), left - 6, y(v));
  }
  ctx.save(); ctx.translate(12, (top + h - bottom) / 2); ctx.rotate(-Math.PI / 2);
  ctx.textAlign = "center"; ctx.fillText(unit, 0, 0); ctx.restore();
  // the x axis: "now" at the right, a label every 30 s (every minute past two)
  ctx.textAlign = "center"; ctx.textBaseline = "top";
  const every = span <= 120 ? 30 : 60;
  for (let ago = 0; ago < span; ago += every) {
    const px = x(n - 1 - ago);
    const label = ago === 0 ? "now" : every === 30 ? `\u2212${ago} s` : `\u2212${ago / 60} min`;
    ctx.fillText(label, Math.min(px, w - right - 12), h - bottom + 6);
  }
  // the lines, a legend above
  let lx = left;
  for (const s of series) {
    ctx.strokeStyle = s.colour; ctx.fillStyle = s.colour; ctx.lineWidth = 1.6; ctx.beginPath();
    let drawing = false;
    s.values.forEach((v, i) => {
      if (v === null) { drawing = false; return; }
      if (drawing) ctx.lineTo(x(i), y(v)); else ctx.moveTo(x(i), y(v));
      drawing = true;
    });
    ctx.stroke();
    s.values.forEach((v, i) => {  // a point with no neighbour is a dot, not nothing
      const alone = (j) => j < 0 || j >= n || s.values[j] === null;
      if (v !== null && alone(i - 1) && alone(i + 1)) ctx.fillRect(x(i) - 2, y(v) - 2, 4, 4);
    });
    ctx.fillStyle = s.colour; ctx.fillRect(lx, 6, 10, 10);
    ctx.fillStyle = "#1d232b"; ctx.textAlign = "left"; ctx.textBaseline = "top";
    ctx.fillText(s.label, lx + 14, 5);
    lx += ctx.measureText(s.label).width + 30;
  }
  const first = series[0].values;
  canvas.dataset.points = String(n);
  canvas.dataset.total = String(first.reduce((a, v) => a + (v || 0), 0));
  canvas.dataset.max = String(max);
}

function lastSeconds(series, k) {
  return series.slice(Math.max(0, series.length - k));
}

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
  $("fig-records").dataset.total = String(s.totals.records);

  const times = s.series.map((p) => p.t);
  drawChart($("chart-records"), times, [
    { label: "records committed", colour: "#1f6feb", values: s.series.map((p) => p.records) },
  ], "records / s");
  drawChart($("chart-transactions"), times, [
    { label: "committed", colour: "#067647", values: s.series.map((p) => p.committed) },
    { label: "not committed", colour: "#cf222e", values: s.series.map((p) => p.not_committed) },
  ], "transactions / s");
  drawChart($("chart-phases"), times, Object.keys(PHASE_COLOURS).map((name) => ({
    label: name, colour: PHASE_COLOURS[name], values: s.series.map((p) => p.phases_ms[name]),
  })), "ms");

  const body = $("partitions").tBodies[0];
  body.replaceChildren(...(s.partitions.length ? s.partitions.map((p) => {
    const row = document.createElement("tr");
    for (const [text, cls] of [[p.topic, ""], [String(p.partition), "num"], [fmt(p.lag), "num"]]) {
      const cell = document.createElement("td"); cell.textContent = text; if (cls) cell.className = cls;
      row.append(cell);
    }
    return row;
  }) : [Object.assign(document.createElement("tr"), { innerHTML: "<td colspan=3>none held</td>" })]));

  const stages = s.about.stages || [];
  $("stages-part").hidden = stages.length === 0;  // one processor: no stages to show
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

// One request at a time, each given 3 s: a frozen app turns the page stale, it does not
// pile requests up, and an old answer never lands after a newer one.
async function refresh() {
  const status = $("status");
  try {
    const answer = await fetch("/console/snapshot.json", {
      cache: "no-store", signal: AbortSignal.timeout(3000),
    });
    if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
    const s = await answer.json();
    render(s);
    status.textContent = `updated ${clock(s.now)}, every ${EVERY_MS / 1000} s`;
    status.classList.remove("stale");
  } catch (err) {
    status.textContent = `no answer from the app (${err.message}): the figures below are stale`;
    status.classList.add("stale");
  }
  setTimeout(refresh, EVERY_MS);
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

refresh();
