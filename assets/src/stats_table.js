// A sortable per-function statistics table. It only needs rows of
// {mfa, count, total, mean, max, exceptions} (durations in nanoseconds), so the calls
// widget's stats tab and a separate stats widget can both use it.

import { formatDuration, formatCount } from "./format.js";

export const STATS_COLUMNS = [
  { key: "mfa", label: "Function", numeric: false },
  { key: "count", label: "Calls", numeric: true, format: formatCount },
  { key: "total", label: "Total", numeric: true, format: formatDuration, bar: true },
  { key: "mean", label: "Mean", numeric: true, format: formatDuration },
  { key: "max", label: "Max", numeric: true, format: formatDuration },
  { key: "exceptions", label: "Exceptions", numeric: true, format: formatCount },
];

/** Sorts stats rows by `key`, numbers descending by default, names ascending; nulls last. */
export function sortStats(rows, key, descending) {
  const dir = descending ? -1 : 1;
  return rows.slice().sort((a, b) => {
    const x = a[key];
    const y = b[key];
    if (x == null && y == null) return a.mfa < b.mfa ? -1 : 1;
    if (x == null) return 1;
    if (y == null) return -1;
    if (x < y) return -dir;
    if (x > y) return dir;
    return a.mfa < b.mfa ? -1 : a.mfa > b.mfa ? 1 : 0;
  });
}

export class StatsTable {
  /**
   * @param {HTMLElement} parent
   * @param {object} opts columns (default STATS_COLUMNS), sortKey, descending, empty (text)
   */
  constructor(parent, opts = {}) {
    this.columns = opts.columns || STATS_COLUMNS;
    this.sortKey = opts.sortKey || "count";
    this.descending = opts.descending ?? true;
    this.emptyText = opts.empty || "No calls yet.";
    this.rows = [];

    this.el = document.createElement("div");
    this.el.className = "kt-stats";
    this.table = document.createElement("table");
    this.table.className = "kt-table";
    const head = this.table.createTHead().insertRow();
    this.headers = this.columns.map((col) => {
      const th = document.createElement("th");
      th.textContent = col.label;
      th.dataset.key = col.key;
      th.className = col.numeric ? "kt-num" : "";
      th.tabIndex = 0;
      th.addEventListener("click", () => this.sortBy(col.key));
      th.addEventListener("keydown", (e) => e.key === "Enter" && this.sortBy(col.key));
      head.appendChild(th);
      return th;
    });
    this.body = this.table.createTBody();
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
      this.descending = key !== "mfa";
    }
    this.render(this.rows);
  }

  render(rows) {
    this.rows = rows;
    const sorted = sortStats(rows, this.sortKey, this.descending);
    const maxTotal = rows.reduce((m, r) => Math.max(m, r.total || 0), 0);

    for (const th of this.headers) {
      const active = th.dataset.key === this.sortKey;
      th.classList.toggle("kt-sorted", active);
      th.dataset.dir = active ? (this.descending ? "desc" : "asc") : "";
      th.setAttribute("aria-sort", active ? (this.descending ? "descending" : "ascending") : "none");
    }

    const frag = document.createDocumentFragment();
    for (const row of sorted) {
      const tr = document.createElement("tr");
      for (const col of this.columns) {
        const td = document.createElement("td");
        const value = row[col.key];
        if (col.numeric) td.className = "kt-num";
        if (col.key === "exceptions" && value > 0) td.classList.add("kt-bad");
        if (col.bar && maxTotal > 0) {
          const bar = document.createElement("span");
          bar.className = "kt-bar";
          bar.style.width = `${Math.round(((value || 0) / maxTotal) * 100)}%`;
          td.appendChild(bar);
        }
        const text = document.createElement("span");
        text.textContent = value == null ? "–" : col.format ? col.format(value) : String(value);
        if (!col.numeric) text.className = "kt-mono";
        td.appendChild(text);
        tr.appendChild(td);
      }
      frag.appendChild(tr);
    }
    this.body.replaceChildren(frag);
    this.empty.hidden = rows.length > 0;
  }
}
