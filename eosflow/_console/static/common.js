// eosflow's console, what both of its pages use: numbers, times and canvas charts.
// No framework and no build step: what the browser has.
"use strict";

const $ = (id) => document.getElementById(id);

function fmt(n, digits = 0) {
  if (n === null || n === undefined || Number.isNaN(n)) return "\u2013";
  return n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function clock(t) {
  return new Date(t * 1000).toLocaleTimeString("en-GB", { hour12: false });
}

// An event time (ms since the epoch) with its date, in UTC: it may be days from now.
function eventTime(ms) {
  const at = new Date(ms ?? NaN);
  if (!Number.isFinite(at.getTime())) return ms === null || ms === undefined ? "\u2013" : `${ms} ms`;
  return at.toISOString().slice(0, 19).replace("T", " ") + " UTC";
}

// A size in bytes, in the largest binary unit under 1,024 of it.
function bytes(n) {
  if (n === null || n === undefined) return "\u2013";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${fmt(n, i === 0 ? 0 : 1)} ${units[i]}`;
}

// A 1-2-5 step giving about `ticks` intervals up to `max`.
function niceStep(max, ticks) {
  const raw = max / ticks;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (raw <= m * power) return m * power;
  return 10 * power;
}

// Lines over time with a y axis in `unit` and an x axis in minutes before now.
// `marks`: moments to show as dashed vertical lines ({t: seconds, colour}), those
// within the chart's seconds; how many were drawn is kept in `data-marks`.
function drawChart(canvas, times, series, unit, marks = []) {
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
  // the marks, under the legend's row
  let drawnMarks = 0;
  ctx.setLineDash([4, 3]); ctx.lineWidth = 1.2;
  for (const m of marks) {
    const i = Math.floor(m.t) - times[0];
    if (n === 0 || i < 0 || i > n - 1) continue;
    ctx.strokeStyle = m.colour;
    ctx.beginPath(); ctx.moveTo(x(i), top); ctx.lineTo(x(i), h - bottom); ctx.stroke();
    drawnMarks++;
  }
  ctx.setLineDash([]);
  canvas.dataset.marks = String(drawnMarks);
  const first = series[0].values;
  canvas.dataset.totals = series.map((s) => s.values.reduce((a, v) => a + (v || 0), 0)).join(",");
  canvas.dataset.points = String(n);
  canvas.dataset.drawn = String(first.filter((v) => v !== null).length);
  canvas.dataset.total = String(first.reduce((a, v) => a + (v || 0), 0));
  canvas.dataset.max = String(max);
}

function lastSeconds(series, k) {
  return series.slice(Math.max(0, series.length - k));
}


// Ask `url` for JSON every `everyMs`, one request at a time, each given `timeoutMs`: a
// frozen server turns the page stale, it does not pile requests up, and an old answer
// never lands after a newer one. `render` draws an answer; `said` is the status line.
function poll(url, everyMs, timeoutMs, render, said, nobody) {
  async function refresh() {
    const status = $("status");
    try {
      const answer = await fetch(url, { cache: "no-store", signal: AbortSignal.timeout(timeoutMs) });
      if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
      const s = await answer.json();
      render(s);
      status.textContent = said(s);
      status.classList.remove("stale");
    } catch (err) {
      status.textContent = `no answer from ${nobody} (${err.message}): the figures below are stale`;
      status.classList.add("stale");
    }
    setTimeout(refresh, everyMs);
  }
  refresh();
}

// A table row of [text, class] cells, the text set as text (never as markup).
function row(cells) {
  const tr = document.createElement("tr");
  for (const [text, cls] of cells) {
    const cell = document.createElement("td");
    cell.textContent = text;
    if (cls) cell.className = cls;
    tr.append(cell);
  }
  return tr;
}
