// The stats widget (Kino.Trace.stats/2): calls, time and memory per function from the
// VM's own counters, refreshed by the server about once a second. The table is the
// shared StatsTable with the columns below; clicking a function opens its per-process
// drill-down (with `latency: true`, each process's p50, p99, max and histogram; at most
// the server's `processes` of them, the rest summed in one line). Payloads are
// KinoTrace.Widget.StatsPayload.snapshot/2 maps.

import { StatsTable } from "./stats_table.js";
import { formatCount, formatMicros, formatShare } from "./format.js";

// (the figures' formatters live in format.js, with the others; exported here too)
export { formatMicros, formatShare };
import { h, button } from "./dom.js";
import { latencyColumns, withLatency, histogram } from "./latency_view.js";

const STATUS_LABELS = { running: "Running", stopped: "Stopped" };


/** Memory in words, compactly: 0 w, 950 w, 12.5k w. */
export function formatWords(words) {
  if (words == null) return "";
  return `${formatCount(Math.round(words))} w`;
}


/** A plain number with one or two decimals (per-call figures). */
function formatMean(x) {
  if (x == null) return "";
  if (x >= 1000) return formatCount(Math.round(x));
  return x >= 100 ? String(Math.round(x)) : x.toFixed(x >= 10 ? 1 : 2).replace(/\.?0+$/, "");
}

/**
 * The stats table's columns for a snapshot: what the session measures (time and memory
 * can be off) decides which figures show.
 */
export function statsColumns(measured = { time: true, memory: true }) {
  const cols = [
    { key: "name", label: "Function", numeric: false, cellTitle: (row) => row.title || null },
    { key: "calls", label: "Calls", numeric: true, format: formatCount, title: "Calls counted" },
  ];
  if (measured.time) {
    cols.push(
      {
        key: "time_us",
        label: "Time",
        numeric: true,
        format: formatMicros,
        bar: (row) => row.time_share,
        title: "Time the function ran (not waiting), without other counted functions; the bar is its share",
      },
      { key: "time_share", label: "% time", numeric: true, format: formatShare },
      { key: "per_call_us", label: "Per call", numeric: true, format: (us) => formatMicros(us) }
    );
  }
  if (measured.latency) cols.push(...latencyColumns());
  if (measured.memory) {
    cols.push(
      {
        key: "memory_words",
        label: "Memory",
        numeric: true,
        format: formatWords,
        title: "Words allocated on the process heap",
      },
      { key: "per_call_words", label: "Per call", numeric: true, format: (w) => `${formatMean(w)} w` }
    );
  }
  return cols;
}

/** The drill-down rows of a function: its processes and the summed rest. */
export function processRows(row) {
  const rows = (row.processes || []).map((p) => ({ ...p, label: p.name || p.pid }));
  if (row.processes_omitted) {
    const o = row.processes_omitted;
    rows.push({
      label: `${o.count} more processes`,
      pid: null,
      calls: o.calls,
      time_us: o.time_us,
      memory_words: o.memory_words,
      time_share: o.time_us != null && row.time_us ? o.time_us / row.time_us : null,
      memory_share: o.memory_words != null && row.memory_words ? o.memory_words / row.memory_words : null,
      omitted: true,
    });
  }
  return rows;
}


export class StatsWidget {
  /**
   * @param {Transport} server the link to Kino.Trace.StatsWidget
   * @param {object} data the connect payload: status, interval, snapshot
   */
  constructor(server, data) {
    this.server = server;
    this.status = data.status || "running";
    this.interval = data.interval || 1000;
    this.snapshot = data.snapshot || emptySnapshot();
    this.table = null; // the StatsTable, rebuilt when what is measured changes
    this.columnsFor = null; // what the table's columns were made for
    this.build(server.root);
    this.render();

    server.on("snapshot", ({ status, snapshot }) => {
      this.status = status || this.status;
      this.snapshot = snapshot;
      this.render();
    });
    server.on("tick", ({ status, elapsed_us, taken_at }) => {
      this.status = status || this.status;
      this.snapshot = { ...this.snapshot, elapsed_us, taken_at };
      this.renderHeader();
    });
    server.on("status", ({ status, snapshot }) => {
      this.status = status;
      if (snapshot) this.snapshot = snapshot;
      this.render();
    });
  }

  build(root) {
    root.classList.add("kino-trace");
    this.root = h("div", { class: "kt-root kt-stats-widget" });
    this.statusEl = h("span", { class: "kt-status", "data-testid": "status" });
    this.countersEl = h("span", { class: "kt-counters", "data-testid": "counters" });
    this.resetButton = button("Reset", "reset", () => this.server.push("reset"));
    this.stopButton = button("Stop", "stop", () => this.server.push("stop"));
    this.patternsEl = h("div", { class: "kt-stats-patterns" });
    const top = h(
      "div",
      { class: "kt-top" },
      h("div", { class: "kt-title" }, h("span", { class: "kt-logo", text: "Call stats" }), this.statusEl),
      this.countersEl,
      h("div", { class: "kt-controls" }, this.resetButton, this.stopButton)
    );
    const header = h("div", { class: "kt-header" }, top, this.patternsEl);
    this.tablePanel = h("div", { class: "kt-panel" });
    this.noteEl = h("div", { class: "kt-stats-note kt-muted" });
    this.root.append(header, this.tablePanel, this.noteEl);
    root.appendChild(this.root);
  }

  /** (Re)builds the table when what is measured changes, keeping sort and open rows. */
  ensureTable() {
    const measured = this.snapshot.measured || { time: true, memory: true };
    const sig = `${measured.time}|${measured.memory}|${measured.latency}`;
    if (this.columnsFor === sig) return;
    const old = this.table;
    this.table = new StatsTable(h("div"), {
      columns: statsColumns(measured),
      rowKey: "key",
      sortKey: old ? old.sortKey : measured.time ? "time_us" : "calls",
      descending: old ? old.descending : true,
      empty: "No calls counted yet.",
      label: "Calls, time and memory per function",
      detail: (row) => this.drill(row),
    });
    if (old) this.table.open = old.open;
    this.tablePanel.replaceChildren(this.table.el);
    this.columnsFor = sig;
  }

  render() {
    this.ensureTable();
    this.table.render((this.snapshot.rows || []).map((row) => withLatency(row, row.latency)));
    this.renderHeader();
  }

  renderHeader() {
    const s = this.snapshot;
    const t = s.totals || {};
    this.statusEl.textContent = STATUS_LABELS[this.status] || this.status;
    this.statusEl.dataset.status = this.status;
    const counter = (name, value, label) =>
      h("span", { class: "kt-counter", "data-counter": name }, h("b", { text: value }), label ? ` ${label}` : "");
    const parts = [
      counter("functions", formatCount(t.functions || 0), t.functions === 1 ? "function" : "functions"),
      counter("calls", formatCount(t.calls || 0), "calls"),
    ];
    if (s.measured && s.measured.time) parts.push(counter("time", formatMicros(t.time_us || 0), "running"));
    if (s.measured && s.measured.memory) parts.push(counter("memory", formatWords(t.memory_words || 0), "allocated"));
    parts.push(h("span", { class: "kt-counter kt-muted", "data-counter": "elapsed", text: `in ${formatElapsed(s.elapsed_us)}` }));
    this.countersEl.replaceChildren(...parts);
    this.patternsEl.replaceChildren(...(s.patterns || []).map((p) => h("span", { class: "kt-chip kt-mono", text: p })));
    const ended = this.status !== "running";
    this.resetButton.disabled = ended;
    this.stopButton.disabled = ended;
    const notes = [];
    if (s.rows_omitted) notes.push(`${formatCount(s.rows_omitted)} more functions not shown.`);
    notes.push(
      ended
        ? "The session has ended; these are its last figures."
        : `Refreshed every ${this.interval >= 1000 ? `${this.interval / 1000} s` : `${this.interval} ms`}. Time counts only while the function runs, not while it waits. Click a function for its processes.`
    );
    this.noteEl.textContent = notes.join(" ");
  }

  /** The per-process drill-down of one function. */
  drill(row) {
    const measured = this.snapshot.measured || { time: true, memory: true };
    const rows = processRows(row);
    const head = ["Process", "Calls"];
    if (measured.time) head.push("Time", "Share of time");
    if (measured.memory) head.push("Memory", "Share of memory");
    if (measured.latency) head.push("p50", "p99", "Max", "Distribution");
    const table = h("table", { class: "kt-subtable", "data-testid": "drill" });
    const tr = h("tr", {}, ...head.map((text, i) => h("th", { class: i && text !== "Distribution" ? "kt-num" : "", text })));
    table.appendChild(h("thead", {}, tr));
    const body = h("tbody");
    for (const p of rows) {
      const cells = [
        h("td", { class: "kt-mono" + (p.omitted ? " kt-muted" : ""), title: p.pid || "" }, p.label, p.name ? h("span", { class: "kt-muted", text: ` ${p.pid}` }) : ""),
        h("td", { class: "kt-num", text: formatCount(p.calls) }),
      ];
      if (measured.time) cells.push(h("td", { class: "kt-num", text: formatMicros(p.time_us) }), shareCell(p.time_share));
      if (measured.memory) cells.push(h("td", { class: "kt-num", text: formatWords(p.memory_words) }), shareCell(p.memory_share));
      if (measured.latency) cells.push(...latencyCells(p.latency));
      body.appendChild(h("tr", { "data-pid": p.pid || "" }, ...cells));
    }
    table.appendChild(body);
    const latency = row.latency ? latencySummary(row.latency) : "";
    const title = h("div", { class: "kt-drill-title" }, h("span", { class: "kt-mono", text: row.name }), row.key !== row.name ? h("span", { class: "kt-muted kt-mono kt-raw-mfa", text: ` · ${row.key}` }) : "", h("span", { class: "kt-muted", text: ` · ${rows.length} ${rows.length === 1 ? "process" : "processes"}` }));
    return h("div", { class: "kt-drill-body" }, title, latency, table);
  }
}

/** A function's wall-time distribution in its drill-down: the figures and a larger histogram. */
function latencySummary(l) {
  const figures = [
    ["returned", formatCount(l.count)],
    ["min", formatMicros(l.min)],
    ["p50", formatMicros(l.p50)],
    ["p90", formatMicros(l.p90)],
    ["p99", formatMicros(l.p99)],
    ["p99.9", formatMicros(l.p999)],
    ["max", formatMicros(l.max)],
  ];
  if (l.unknown) figures.push(["end unknown", formatCount(l.unknown)]);
  if (l.exceptions && l.exceptions.count) figures.push(["raised", `${formatCount(l.exceptions.count)} (p50 ${formatMicros(l.exceptions.p50)}, max ${formatMicros(l.exceptions.max)})`]);
  return h(
    "div",
    { class: "kt-latency-summary", "data-testid": "latency-summary" },
    histogram(l.histogram, { width: 240, height: 40 }),
    h("div", { class: "kt-latency-figures" }, ...figures.map(([k, v]) => h("span", {}, h("span", { class: "kt-muted", text: `${k} ` }), h("b", { class: "kt-mono", text: v || "–" }))))
  );
}

/** A process's wall-time figures in the drill-down: p50, p99, max and its histogram ("–" without). */
function latencyCells(l) {
  const figure = (us) => h("td", { class: "kt-num", text: l && us != null ? formatMicros(us) : "–" });
  return [figure(l && l.p50), figure(l && l.p99), figure(l && l.max), h("td", { "data-testid": "process-histogram" }, histogram(l && l.histogram))];
}

function shareCell(share) {
  const td = h("td", { class: "kt-num kt-share" });
  if (share == null) {
    td.textContent = "–";
    return td;
  }
  const track = h("span", { class: "kt-share-track" }, h("span", { class: "kt-share-fill", style: `width:${Math.round(share * 1000) / 10}%` }));
  td.append(track, h("span", { text: formatShare(share) }));
  return td;
}

function formatElapsed(us) {
  if (!us) return "0 s";
  const s = us / 1e6;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s % 60)} s`;
}

function emptySnapshot() {
  return { rows: [], totals: { calls: 0, functions: 0 }, measured: { time: true, memory: true }, patterns: [], elapsed_us: 0 };
}
