// eosflow's console, a group's page: asks eosflow console for /console/group.json every
// 2 s (it asks the broker at most that often, whatever the number of pages open) and
// draws it (common.js: the charts).
"use strict";

const EVERY_MS = 2000;
const WINDOW_S = 300;

// The history's samples as one value a second over the last five minutes, each second
// holding the latest sample at or before it (null before the first).
function perSecond(history, now) {
  const last = Math.floor(now), times = [], values = [];
  let i = 0, value = null;
  for (let t = last - WINDOW_S + 1; t <= last; t++) {
    while (i < history.length && history[i].t < t + 1) value = history[i++].lag;
    times.push(t);
    values.push(value);
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
  $("partitions").tBodies[0].replaceChildren(...s.partitions.map((p) => {
    const row = document.createElement("tr");
    const cells = [[p.topic, ""], [String(p.partition), "num"], [fmt(p.committed), "num"],
      [fmt(p.last_stable), "num"], [fmt(p.lag), "num"], [p.member || "\u2013", ""]];
    for (const [text, cls] of cells) {
      const cell = document.createElement("td"); cell.textContent = text; if (cls) cell.className = cls;
      row.append(cell);
    }
    return row;
  }));
}

// One request at a time, each given 15 s (a look at the broker can take a few).
async function refresh() {
  const status = $("status");
  try {
    const answer = await fetch("/console/group.json", {
      cache: "no-store", signal: AbortSignal.timeout(15000),
    });
    if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
    const s = await answer.json();
    render(s);
    status.textContent = `looked at ${clock(s.now)}, every ${EVERY_MS / 1000} s`;
    status.classList.remove("stale");
  } catch (err) {
    status.textContent = `no answer from eosflow console (${err.message}): the figures below are stale`;
    status.classList.add("stale");
  }
  setTimeout(refresh, EVERY_MS);
}

refresh();
