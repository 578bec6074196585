// A sortable per-function statistics table, shared by the calls widget's stats tab and
// the stats widget (Kino.Trace.stats/2). What it shows is a column config:
//
//   { key, label, numeric, format(value, row), bar, bad(value), title, cellTitle(row), mono,
//     render(row) -> element (the cell's content, instead of the formatted value) }
//
// `bar: true` draws a bar for the value relative to the column's largest value;
// `bar: (row) => fraction` draws one for a share (0 to 1). Rows are identified by
// `rowKey` (default "mfa"). With `detail: (row) => element`, clicking a row opens a
// drill-down under it; which rows are open survives re-renders (live updates).

import { formatDuration, formatCount } from "./format.js";

/**
 * The calls widget's columns: rows of {mfa, label, count, total, mean, max, exceptions},
 * in ns (LogModel.statsRows); a function shows as its label, its raw name on hover.
 */
export const STATS_COLUMNS = [
  { key: "mfa", label: "Function", numeric: false, format: (mfa, row) => row.label || mfa, cellTitle: (row) => (row.label ? row.mfa : null) },
  { key: "count", label: "Calls", numeric: true, format: formatCount },
  { key: "total", label: "Total", numeric: true, format: formatDuration, bar: true },
  { key: "mean", label: "Mean", numeric: true, format: formatDuration },
  { key: "max", label: "Max", numeric: true, format: formatDuration },
  { key: "exceptions", label: "Exceptions", numeric: true, format: formatCount, bad: (n) => n > 0 },
];

/** Sorts rows by `key`, numbers descending by default, names ascending; nulls last. */
export function sortStats(rows, key, descending, rowKey = "mfa") {
  const dir = descending ? -1 : 1;
  const tie = (a, b) => (a[rowKey] < b[rowKey] ? -1 : a[rowKey] > b[rowKey] ? 1 : 0);
  return rows.slice().sort((a, b) => {
    const x = a[key];
    const y = b[key];
    if (x == null && y == null) return tie(a, b);
    if (x == null) return 1;
    if (y == null) return -1;
    if (x < y) return -dir;
    if (x > y) return dir;
    return tie(a, b);
  });
}

/** The width (0..1) of a cell's bar, or null for none. */
export function barFraction(col, row, max) {
  if (!col.bar) return null;
  if (typeof col.bar === "function") {
    const f = col.bar(row);
    return f == null ? null : Math.max(0, Math.min(1, f));
  }
  return max > 0 && row[col.key] != null ? row[col.key] / max : null;
}

export class StatsTable {
  /**
   * @param {HTMLElement} parent
   * @param {object} opts columns (default STATS_COLUMNS), sortKey, descending, empty (text),
   *   rowKey (default "mfa"), detail(row) -> element (a drill-down on click), label (aria)
   */
  constructor(parent, opts = {}) {
    this.columns = opts.columns || STATS_COLUMNS;
    this.rowKey = opts.rowKey || "mfa";
    this.sortKey = opts.sortKey || "count";
    this.descending = opts.descending ?? true;
    this.emptyText = opts.empty || "No calls yet.";
    this.detail = opts.detail || null;
    this.open = new Set();
    this.rows = [];

    this.el = document.createElement("div");
    this.el.className = "kt-stats";
    this.table = document.createElement("table");
    this.table.className = "kt-table" + (this.detail ? " kt-table-drill" : "");
    if (opts.label) this.table.setAttribute("aria-label", opts.label);
    const head = this.table.createTHead().insertRow();
    this.headers = this.columns.map((col) => {
      const th = document.createElement("th");
      th.textContent = col.label;
      th.dataset.key = col.key;
      th.className = col.numeric ? "kt-num" : "";
      if (col.title) th.title = col.title;
      th.tabIndex = 0;
      th.addEventListener("click", () => this.sortBy(col.key));
      th.addEventListener("keydown", (e) => e.key === "Enter" && this.sortBy(col.key));
      head.appendChild(th);
      return th;
    });
    this.body = this.table.createTBody();
    this.body.addEventListener("click", (event) => {
      const tr = event.target.closest("tr[data-key]");
      if (tr && this.detail) this.toggle(tr.dataset.key);
    });
    this.body.addEventListener("keydown", (event) => {
      const tr = event.target.closest("tr[data-key]");
      if (tr && this.detail && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        this.toggle(tr.dataset.key);
        this.body.querySelector(`tr[data-key="${CSS.escape(tr.dataset.key)}"]`)?.focus();
      }
    });
    this.empty = document.createElement("div");
    this.empty.className = "kt-empty";
    this.empty.textContent = this.emptyText;
    this.el.append(this.table, this.empty);
    parent.appendChild(this.el);
  }

  sortBy(key) {
    if (key === this.sortKey) this.descending = !this.descending;
    else {
      this.sortKey = key;
      const col = this.columns.find((c) => c.key === key);
      this.descending = col ? col.numeric !== false : true;
    }
    this.render(this.rows);
  }

  toggle(key) {
    if (this.open.has(key)) this.open.delete(key);
    else this.open.add(key);
    this.render(this.rows);
  }

  render(rows) {
    this.rows = rows;
    const sorted = sortStats(rows, this.sortKey, this.descending, this.rowKey);
    const max = {};
    for (const col of this.columns) {
      if (col.bar === true) max[col.key] = rows.reduce((m, r) => Math.max(m, r[col.key] || 0), 0);
    }

    for (const th of this.headers) {
      const active = th.dataset.key === this.sortKey;
      th.classList.toggle("kt-sorted", active);
      th.dataset.dir = active ? (this.descending ? "desc" : "asc") : "";
      th.setAttribute("aria-sort", active ? (this.descending ? "descending" : "ascending") : "none");
    }

    const frag = document.createDocumentFragment();
    for (const row of sorted) {
      const key = String(row[this.rowKey]);
      const open = this.detail && this.open.has(key);
      const tr = document.createElement("tr");
      tr.dataset.key = key;
      if (this.detail) {
        tr.tabIndex = 0;
        tr.setAttribute("aria-expanded", String(!!open));
        tr.classList.toggle("kt-open", !!open);
      }
      for (const col of this.columns) {
        const td = document.createElement("td");
        const value = row[col.key];
        if (col.numeric) td.className = "kt-num";
        const cellTitle = col.cellTitle && col.cellTitle(row);
        if (cellTitle) td.title = cellTitle;
        if (col.bad && value != null && col.bad(value, row)) td.classList.add("kt-bad");
        const fraction = barFraction(col, row, max[col.key]);
        if (fraction != null) {
          const bar = document.createElement("span");
          bar.className = "kt-bar";
          bar.style.width = `${Math.round(fraction * 1000) / 10}%`;
          td.appendChild(bar);
        }
        if (col.render) {
          td.appendChild(col.render(row));
          tr.appendChild(td);
          continue;
        }
        const text = document.createElement("span");
        text.textContent = value == null ? "–" : col.format ? col.format(value, row) : String(value);
        if (!col.numeric || col.mono) text.className = "kt-mono";
        if (!col.numeric && this.detail) td.classList.add("kt-drill-cell");
        td.appendChild(text);
        tr.appendChild(td);
      }
      frag.appendChild(tr);
      if (open) {
        const sub = document.createElement("tr");
        sub.className = "kt-drill";
        const td = document.createElement("td");
        td.colSpan = this.columns.length;
        td.appendChild(this.detail(row));
        sub.appendChild(td);
        frag.appendChild(sub);
      }
    }
    this.body.replaceChildren(frag);
    this.empty.hidden = rows.length > 0;
  }
}
