// eosflow's console, a group's page: asks eosflow console for /console/group.json every
// 2 s (it asks the broker at most that often, whatever the number of pages open) and
// draws it (common.js: the charts).
"use strict";

const EVERY_MS = 2000;
const WINDOW_S = 300;

// The history's samples as one value a second over the last five minutes, each second
// holding the latest sample at or before it while that is at most GAP_S old (null
// otherwise, and for a look that failed): no page open, or the broker away, is a gap.
const GAP_S = 3;
function perSecond(history, now) {
  const last = Math.floor(now), times = [], values = [];
  let i = 0, sample = null;
  for (let t = last - WINDOW_S + 1; t <= last; t++) {
    while (i < history.length && history[i].t < t + 1) sample = history[i++];
    times.push(t);
    values.push(sample !== null && t - sample.t <= GAP_S ? sample.lag : null);
  }
  return { times, values };
}

function render(s) {
  $("group").textContent = s.group;
  document.title = `eosflow console: group ${s.group}`;
  const error = $("error");
  error.hidden = !s.error;
  error.textContent = s.error ? `the last look failed: ${s.error}` : "";
  const { times, values } = perSecond(s.history, s.now);
  drawChart($("chart-lag"), times, [{ label: "total lag", colour: "#1f6feb", values }], "records");
  if (!s.partitions) return;  // nothing read yet: an error only
  $("fig-lag").textContent = fmt(s.lag);
  $("fig-members").textContent = fmt(s.members);
  $("fig-state").textContent = s.state;
  const held = s.partitions.filter((p) => p.member !== null).length;
  $("fig-partitions").textContent = `${held} / ${s.partitions.length}`;
  $("partitions").tBodies[0].replaceChildren(...s.partitions.map((p) => row([
    [p.topic, ""], [String(p.partition), "num"], [fmt(p.committed), "num"],
    [fmt(p.last_stable), "num"], [fmt(p.lag), "num"], [p.member || "\u2013", ""],
  ])));
  renderTransactions(s.transactions, s.transactions_note, s.now);
}

// Each eosflow member's transactional id as its coordinator holds it; null, with the
// note saying why, where they were not read (a cluster before Kafka 3.0, a failed look).
function renderTransactions(txns, why, now) {
  const note = $("txn-note");
  note.hidden = !why;
  note.textContent = why || "";
  const body = $("transactions").tBodies[0];
  if (!txns || txns.length === 0) {
    const none = "no member with a transactional id this client may describe";
    body.replaceChildren(row([[txns === null ? "not told" : none, ""]]));
    body.rows[0].cells[0].colSpan = 6;
    return;
  }
  body.replaceChildren(...txns.map((t) => row([
    [t.client, ""], [t.id, ""], [t.state, ""], [t.producer, "num"],
    [t.started_ms === null ? "\u2013" : `${fmt(Math.max(0, now - t.started_ms / 1000), 1)} s`, "num"],
    [t.partitions.join(", ") || "\u2013", ""],
  ])));
}

// a look at the broker can take many seconds (eosflow console gives it 30)
poll("/console/group.json", EVERY_MS, 35000, render,
  (s) => `looked at ${clock(s.now)}, every ${EVERY_MS / 1000} s`, "eosflow console");
