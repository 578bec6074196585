// Latency figures in the stats tables (the trace widget's Stats tab and the stats
// widget): p50, p99 and max columns and a small histogram per row, from the
// distributions the server sends (KinoTrace.Widget.StatsPayload.latency/1, in µs: count,
// p50, p99, max, histogram bars [low_us, count] of adjacent buckets), and a drill-down
// table of a function's distribution per process.

import { h, svg } from "./dom.js";
import { formatCount, formatMicros } from "./format.js";

/**
 * A small histogram on a log time axis: one bar per [low_us, count] at its bucket's
 * place between the first and the last, as tall as its count against the largest; its
 * title lists the bars. An empty distribution draws nothing.
 */
export function histogram(bars, { width = 72, height = 16 } = {}) {
  const el = svg("svg", { class: "kt-histogram", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "data-testid": "histogram" });
  if (!bars || !bars.length) return el;
  const most = Math.max(...bars.map((b) => b[1]));
  const barW = Math.max(2, Math.min(6, width / (bars.length * 1.5)));
  const log = (us) => Math.log(Math.max(us, 0.001));
  const lo = log(bars[0][0]);
  const span = log(bars[bars.length - 1][0]) - lo;
  bars.forEach(([low, count]) => {
    const bh = Math.max(1, Math.round((count / most) * height));
    const x = span > 0 ? ((log(low) - lo) / span) * (width - barW) : (width - barW) / 2;
    el.appendChild(svg("rect", { x: x.toFixed(2), y: height - bh, width: barW.toFixed(2), height: bh }));
  });
  const title = bars.map(([low, count], i) => `≥ ${formatMicros(low)}${i === bars.length - 1 ? "" : ` < ${formatMicros(bars[i + 1][0])}`}: ${formatCount(count)}`);
  el.appendChild(svg("title", {}, title.join("\n")));
  return el;
}

/** The latency of a row (a field `latency` holding the server's distribution). */
const latencyOf = (row) => row.latency || null;

/**
 * The columns of a latency distribution for StatsTable: p50, p99, max and the histogram.
 * Sort keys are the row fields `lat_p50`, `lat_p99`, `lat_max` (µs; see withLatency).
 */
export function latencyColumns({ max = true } = {}) {
  const cols = [
    { key: "lat_p50", label: "p50", numeric: true, format: formatMicros, title: "Median wall time of the calls that returned" },
    { key: "lat_p99", label: "p99", numeric: true, format: formatMicros, title: "99th percentile wall time (within 1.6 %)" },
  ];
  if (max) cols.push({ key: "lat_max", label: "Max", numeric: true, format: formatMicros, title: "Longest call (wall time)" });
  cols.push({
    key: "lat_count",
    label: "Distribution",
    numeric: false,
    title: "Wall times of the calls that returned, shortest left (log buckets); hover for the counts",
    render: (row) => histogram(latencyOf(row) && latencyOf(row).histogram),
  });
  return cols;
}

/** A row with its distribution's figures as sortable fields (lat_p50, lat_p99, lat_max, lat_count). */
export function withLatency(row, latency) {
  if (!latency) return { ...row, latency: null, lat_p50: null, lat_p99: null, lat_max: null, lat_count: null };
  return { ...row, latency, lat_p50: latency.p50, lat_p99: latency.p99, lat_max: latency.max, lat_count: latency.count };
}

/**
 * A function's distribution per process: [{pid, label, latency}] from the "latency"
 * payload's row, with how many more processes were left out. `names` maps pids to
 * registered names when known.
 */
export function latencyDrill(row, names = new Map()) {
  const procs = (row.processes || []).map((p) => ({ ...p, label: names.get(p.pid) || p.pid }));
  const table = h("table", { class: "kt-subtable", "data-testid": "latency-drill" });
  const head = ["Process", "Returned", "p50", "p99", "Max", "Unknown", "Distribution"];
  table.appendChild(h("thead", {}, h("tr", {}, ...head.map((text, i) => h("th", { class: i && i < 6 ? "kt-num" : "", text })))));
  const body = h("tbody");
  for (const p of procs) {
    const l = p.latency;
    body.appendChild(
      h(
        "tr",
        { "data-pid": p.pid },
        h("td", { class: "kt-mono", title: p.pid, text: p.label }),
        h("td", { class: "kt-num", text: formatCount(l.count) }),
        h("td", { class: "kt-num", text: formatMicros(l.p50) || "–" }),
        h("td", { class: "kt-num", text: formatMicros(l.p99) || "–" }),
        h("td", { class: "kt-num", text: formatMicros(l.max) || "–" }),
        h("td", { class: "kt-num", text: formatCount(l.unknown) }),
        h("td", {}, histogram(l.histogram))
      )
    );
  }
  table.appendChild(body);
  const more = row.processes_omitted ? h("div", { class: "kt-muted", text: `${row.processes_omitted} more processes not shown` }) : "";
  return h("div", { class: "kt-drill-body" }, h("div", { class: "kt-drill-title kt-muted", text: `${row.mfa} · wall time per process` }), table, more);
}
