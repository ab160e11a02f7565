// eosflow's console, an app's page: asks the app for /console/snapshot.json once a
// second and draws it (common.js: the charts).
"use strict";

const EVERY_MS = 1000;
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

  $("partitions").tBodies[0].replaceChildren(...(s.partitions.length
    ? s.partitions.map((p) => row([[p.topic, ""], [String(p.partition), "num"],
      [fmt(p.committed), "num"], [fmt(p.position), "num"], [fmt(p.last_stable), "num"],
      [fmt(p.lag), "num"]]))
    : [row([["none held", ""]])]));

  $("late-part").hidden = s.late.length === 0;  // no window has left a record out
  $("late").tBodies[0].replaceChildren(...s.late.map((w) => row([[w.window, ""], [fmt(w.records), "num"]])));

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
