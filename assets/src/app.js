// The trace widget: header (status, counters, controls, pattern editor) and three tabs
// (log, stats, calls). It talks to the server only through `ctx` (Kino's JS API):
// ctx.handleEvent for what the server sends, ctx.pushEvent for requests.

import { LogModel } from "./model.js";
import { VirtualList } from "./virtual_list.js";
import { StatsTable } from "./stats_table.js";
import { CallTree } from "./call_tree.js";
import { PatternEditor } from "./patterns.js";
import {
  formatTime,
  formatDuration,
  formatCount,
  formatRate,
  who,
  entryText,
  entryOutcome,
  entryLine,
} from "./format.js";

const ROW_HEIGHT = 24;
const STATUS_LABELS = {
  running: "Running",
  paused: "Paused",
  stopped: "Stopped",
  limit_reached: "Limit reached",
  timeout: "Timed out",
};
const DROP_LABELS = {
  rate: "rate limit",
  queue_full: "queue full",
  max_events: "event limit",
  closed: "after stop",
  display: "display backlog",
};

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (value != null) el.setAttribute(key, value);
  }
  el.append(...children);
  return el;
}

export class TraceWidget {
  constructor(ctx, data) {
    this.ctx = ctx;
    this.model = new LogModel({ maxEntries: data.max_entries || 200_000 });
    this.status = data.status || "running";
    this.counters = data.counters || {};
    this.patterns = data.patterns || [];
    this.frozen = false; // the user pressed pause: incoming rows wait in `held`
    this.held = [];
    this.tab = "log";
    this.terms = new Map();
    this.selected = null;
    this.dirty = { stats: true, calls: true };

    this.build(ctx.root);
    this.append(data.events || []);
    this.renderStatus();

    ctx.handleEvent("events", ({ events, counters }) => {
      if (counters) this.counters = counters;
      this.append(events);
      this.renderStatus();
    });
    ctx.handleEvent("counters", (counters) => {
      this.counters = counters;
      this.renderStatus();
    });
    ctx.handleEvent("status", ({ status, counters }) => {
      this.status = status;
      if (counters) this.counters = counters;
      if (status !== "paused" && status !== "running") this.unfreeze();
      if (status === "running" && this.frozen && !this.pausing) this.unfreeze();
      this.pausing = false;
      this.renderStatus();
    });
    ctx.handleEvent("patterns", (payload) => {
      this.patterns = payload.patterns;
      this.editor.showResults(payload);
    });
    ctx.handleEvent("clear", () => this.clearLocal());
    ctx.handleEvent("term", (term) => {
      this.terms.set(term.id, term);
      if (this.terms.size > 200) this.terms.delete(this.terms.keys().next().value);
      this.renderDetail();
    });
  }

  // --- building ---------------------------------------------------------------------

  build(root) {
    root.classList.add("kino-trace");
    this.root = h("div", { class: "kt-root" });

    // header: status, counters, controls
    this.statusEl = h("span", { class: "kt-status", "data-testid": "status" });
    this.countersEl = h("span", { class: "kt-counters", "data-testid": "counters" });
    this.pauseButton = this.button("Pause", "pause", () => this.togglePause());
    this.clearButton = this.button("Clear", "clear", () => this.ctx.pushEvent("clear", {}));
    this.stopButton = this.button("Stop", "stop", () => this.ctx.pushEvent("stop", {}));
    this.exportButton = this.button("Export", "export", () => this.toggleMenu());
    this.menu = h(
      "div",
      { class: "kt-menu", hidden: "" },
      this.button("Download JSON", "download-json", () => this.downloadJson(), "kt-menu-item"),
      this.button("Copy as text", "copy-text", () => this.copyText(), "kt-menu-item")
    );
    const exportWrap = h("div", { class: "kt-menu-wrap" }, this.exportButton, this.menu);
    const top = h(
      "div",
      { class: "kt-top" },
      h("div", { class: "kt-title" }, h("span", { class: "kt-logo", text: "Trace" }), this.statusEl),
      this.countersEl,
      h("div", { class: "kt-controls" }, this.pauseButton, this.clearButton, this.stopButton, exportWrap)
    );
    const header = h("div", { class: "kt-header" }, top);
    this.editor = new PatternEditor(header, {
      patterns: this.patterns,
      onApply: (patterns) => this.ctx.pushEvent("set_patterns", { patterns }),
    });

    // tabs
    this.tabButtons = {};
    const tabs = h("div", { class: "kt-tabs", role: "tablist" });
    for (const [key, label] of [["log", "Log"], ["stats", "Stats"], ["calls", "Calls"]]) {
      const b = h("button", { class: "kt-tab", role: "tab", type: "button", "data-tab": key });
      b.append(h("span", { text: label }), h("span", { class: "kt-tab-count" }));
      b.addEventListener("click", () => this.showTab(key));
      tabs.appendChild(b);
      this.tabButtons[key] = b;
    }
    this.filterInput = h("input", {
      class: "kt-filter",
      type: "search",
      placeholder: "Filter…",
      "aria-label": "Filter the log",
      oninput: () => this.applyFilter(),
    });
    this.followButton = this.button("↓ Latest", "follow", () => this.list.scrollToEnd(), "kt-button kt-follow");
    tabs.append(h("div", { class: "kt-tabs-spacer" }), this.followButton, this.filterInput);

    // log panel
    this.logPanel = h("div", { class: "kt-panel kt-log", "data-panel": "log" });
    this.logPanel.appendChild(
      h(
        "div",
        { class: "kt-row kt-row-head" },
        h("span", { class: "kt-c-time", text: "Time" }),
        h("span", { class: "kt-c-node", text: "Node" }),
        h("span", { class: "kt-c-who", text: "Process" }),
        h("span", { class: "kt-c-call", text: "Call" }),
        h("span", { class: "kt-c-out", text: "Result" }),
        h("span", { class: "kt-c-dur", text: "Duration" })
      )
    );
    this.list = new VirtualList(this.logPanel, {
      rowHeight: ROW_HEIGHT,
      length: () => this.model.viewLength,
      item: (i) => this.model.viewAt(i),
      createRow: () => createRow(),
      renderRow: (el, entry) => renderRow(el, entry),
      onSelect: (entry) => this.select(entry),
    });
    this.list.scroller.addEventListener("scroll", () => this.renderFollow());
    this.emptyEl = h("div", { class: "kt-empty kt-log-empty", text: "Waiting for calls…" });
    this.logPanel.appendChild(this.emptyEl);
    this.detailEl = h("div", { class: "kt-detail", hidden: "", "data-testid": "detail" });
    this.logPanel.appendChild(this.detailEl);

    // stats and calls panels
    this.statsPanel = h("div", { class: "kt-panel", "data-panel": "stats", hidden: "" });
    this.stats = new StatsTable(this.statsPanel);
    this.callsPanel = h("div", { class: "kt-panel", "data-panel": "calls", hidden: "" });
    this.calls = new CallTree(this.callsPanel);

    this.root.append(header, tabs, this.logPanel, this.statsPanel, this.callsPanel);
    root.appendChild(this.root);
    document.addEventListener("click", (e) => {
      if (!this.menu.hidden && !e.composedPath().includes(exportWrap)) this.menu.hidden = true;
    });
    this.showTab("log");
  }

  button(label, action, onclick, cls = "kt-button") {
    return h("button", { class: cls, type: "button", "data-action": action, text: label, onclick });
  }

  // --- data -------------------------------------------------------------------------

  append(events) {
    if (!events || !events.length) return;
    if (this.frozen) {
      // bounded: past the model's size the oldest held would be evicted anyway
      for (const e of events) this.held.push(e);
      if (this.held.length > this.model.maxEntries) this.held.splice(0, this.held.length - this.model.maxEntries);
      this.renderStatus();
      return;
    }
    this.model.append(events);
    this.afterChange();
  }

  afterChange() {
    this.list.update();
    this.emptyEl.hidden = this.model.viewLength > 0;
    this.emptyEl.textContent = this.model.filter ? "No entry matches the filter." : "Waiting for calls…";
    this.dirty.stats = this.dirty.calls = true;
    this.renderTabContent();
    this.renderCounts();
    this.renderFollow();
  }

  clearLocal() {
    this.model.clear();
    this.held = [];
    this.terms.clear();
    this.selected = null;
    this.detailEl.hidden = true;
    this.model.setFilter(this.filterInput.value);
    this.afterChange();
    this.renderStatus();
  }

  applyFilter() {
    this.model.setFilter(this.filterInput.value);
    this.list.follow = true;
    this.afterChange();
  }

  togglePause() {
    if (this.frozen || this.status === "paused") {
      this.ctx.pushEvent("resume", {});
      this.unfreeze();
    } else {
      this.ctx.pushEvent("pause", {});
      this.frozen = true;
      this.pausing = true;
    }
    this.renderStatus();
  }

  unfreeze() {
    if (!this.frozen) return;
    this.frozen = false;
    const held = this.held;
    this.held = [];
    if (held.length) {
      this.model.append(held);
      this.afterChange();
    }
  }

  // --- tabs -------------------------------------------------------------------------

  showTab(tab) {
    this.tab = tab;
    for (const [key, b] of Object.entries(this.tabButtons)) {
      b.classList.toggle("kt-tab-active", key === tab);
      b.setAttribute("aria-selected", String(key === tab));
    }
    this.logPanel.hidden = tab !== "log";
    this.statsPanel.hidden = tab !== "stats";
    this.callsPanel.hidden = tab !== "calls";
    this.filterInput.hidden = tab !== "log";
    this.followButton.hidden = tab !== "log";
    if (tab === "log") this.list.update();
    this.renderTabContent(true);
  }

  renderTabContent(force = false) {
    const now = performance.now();
    if (this.tab === "stats" && this.dirty.stats && (force || now - (this.statsAt || 0) > 250)) {
      this.stats.render(this.model.statsRows());
      this.dirty.stats = false;
      this.statsAt = now;
    }
    if (this.tab === "calls" && this.dirty.calls && (force || now - (this.callsAt || 0) > 500)) {
      this.calls.render(this.model.callTrees());
      this.dirty.calls = false;
      this.callsAt = now;
    }
  }

  renderCounts() {
    const m = this.model;
    this.tabButtons.log.lastChild.textContent = m.filtered
      ? `${formatCount(m.viewLength)} of ${formatCount(m.size)}`
      : formatCount(m.size);
    this.tabButtons.stats.lastChild.textContent = m.stats.size ? formatCount(m.stats.size) : "";
    this.root.classList.toggle("kt-multi-node", m.nodes.size > 1);
  }

  renderFollow() {
    this.followButton.classList.toggle("kt-visible", !this.list.follow && this.model.viewLength > 0);
  }

  // --- header -----------------------------------------------------------------------

  renderStatus() {
    const status = this.frozen && this.status === "running" ? "paused" : this.status;
    this.statusEl.textContent = STATUS_LABELS[status] || status;
    this.statusEl.dataset.status = status;

    const c = this.counters || {};
    const dropped = Object.entries(c.dropped || {}).filter(([, n]) => n > 0);
    const droppedTotal = dropped.reduce((sum, [, n]) => sum + n, 0);
    const parts = [
      h("span", { class: "kt-counter", "data-counter": "events" }, h("b", { text: formatCount(c.events || 0) }), " events"),
      h("span", { class: "kt-counter", "data-counter": "rate" }, h("b", { text: formatRate(c.rate) })),
    ];
    const droppedEl = h(
      "span",
      { class: "kt-counter" + (droppedTotal ? " kt-bad" : ""), "data-counter": "dropped" },
      h("b", { text: formatCount(droppedTotal) }),
      " dropped"
    );
    if (droppedTotal) {
      droppedEl.append(
        h("span", {
          class: "kt-muted",
          text: ` (${dropped.map(([reason, n]) => `${DROP_LABELS[reason] || reason} ${formatCount(n)}`).join(", ")})`,
        })
      );
    }
    parts.push(droppedEl);
    if (c.limit) parts.push(h("span", { class: "kt-counter kt-muted", text: `limit ${formatCount(c.limit)}` }));
    if (this.held.length) {
      parts.push(h("span", { class: "kt-counter kt-muted", text: `${formatCount(this.held.length)} held while paused` }));
    }
    this.countersEl.replaceChildren(...parts);

    const ended = !["running", "paused"].includes(this.status);
    const paused = this.frozen || this.status === "paused";
    this.pauseButton.textContent = paused ? "Resume" : "Pause";
    this.pauseButton.dataset.action = paused ? "resume" : "pause";
    this.pauseButton.disabled = ended;
    this.stopButton.disabled = ended;
    this.editor.applyButton.disabled = ended;
  }

  toggleMenu() {
    this.menu.hidden = !this.menu.hidden;
  }

  // --- export -----------------------------------------------------------------------

  exportData() {
    return {
      exported_at: new Date().toISOString(),
      status: this.status,
      patterns: this.patterns,
      counters: this.counters,
      events: this.model.all().map(({ search, ...entry }) => entry),
    };
  }

  downloadJson() {
    this.menu.hidden = true;
    const blob = new Blob([JSON.stringify(this.exportData(), null, 2)], { type: "application/json" });
    const url = URL.createObjectURL(blob);
    const a = h("a", { href: url, download: `trace-${Date.now()}.json` });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }

  exportText() {
    return this.model.all().map(entryLine).join("\n");
  }

  async copyText() {
    this.menu.hidden = true;
    const text = this.exportText();
    try {
      await navigator.clipboard.writeText(text);
    } catch (_error) {
      const area = h("textarea", { style: "position:fixed;opacity:0" });
      area.value = text;
      document.body.appendChild(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    this.flash(`Copied ${formatCount(this.model.size)} entries`);
  }

  flash(text) {
    this.exportButton.textContent = text;
    clearTimeout(this.flashTimer);
    this.flashTimer = setTimeout(() => (this.exportButton.textContent = "Export"), 1500);
  }

  // --- details ----------------------------------------------------------------------

  select(entry) {
    if (!entry) return;
    this.selected = entry;
    for (const id of [entry.id, entry.returnId]) {
      if (id != null && !this.terms.has(id)) this.ctx.pushEvent("get_term", { id });
    }
    this.renderDetail();
  }

  renderDetail() {
    const entry = this.selected;
    if (!entry) return;
    const call = this.terms.get(entry.id);
    const ret = entry.returnId != null ? this.terms.get(entry.returnId) : entry.kind !== "call" ? call : null;

    const title = h(
      "div",
      { class: "kt-detail-title" },
      h("span", { class: "kt-mono kt-call", text: entry.mfa || entry.kind }),
      h("span", { class: "kt-muted kt-mono", text: `${who(entry)} · ${formatTime(entry.time)}` }),
      entry.duration != null ? h("span", { class: "kt-duration", text: formatDuration(entry.duration) }) : "",
      h("button", {
        class: "kt-button kt-close",
        type: "button",
        "aria-label": "Close details",
        text: "×",
        onclick: () => {
          this.selected = null;
          this.list.selected = null;
          this.list.render();
          this.detailEl.hidden = true;
        },
      })
    );
    const sections = [];
    const section = (label, text, cls = "") =>
      sections.push(h("div", { class: "kt-detail-label", text: label }), h("pre", { class: `kt-term ${cls}`, text }));
    const loading = "loading…";

    if (entry.kind === "call") {
      if (call && call.args) call.args.forEach((arg, i) => section(`Argument ${i + 1}`, arg));
      else if (call && call.error) section("Arguments", call.error, "kt-muted");
      else section("Call", entry.call || loading);
    }
    if (entry.result != null) section("Returned", ret ? ret.result ?? ret.error : entry.result);
    if (entry.exception != null) section("Raised", ret ? ret.exception ?? ret.error : entry.exception, "kt-exception");
    if (entry.data != null) section("Data", (ret && ret.data) || entry.data);
    if (entry.kind === "call" && entry.result == null && entry.exception == null) {
      sections.push(h("div", { class: "kt-muted kt-detail-note", text: "No return seen yet." }));
    }
    if ((call && call.cut) || (ret && ret.cut)) {
      sections.push(
        h("div", {
          class: "kt-muted kt-detail-note",
          text: "Parts shown as ... were too large to copy out of the traced process (see the trace's term-size options).",
        })
      );
    }
    this.detailEl.replaceChildren(title, h("div", { class: "kt-detail-body" }, ...sections));
    this.detailEl.hidden = false;
  }
}

// --- log rows ---------------------------------------------------------------------------

function createRow() {
  const el = document.createElement("div");
  el.setAttribute("role", "listitem");
  for (const cls of ["kt-c-time", "kt-c-node", "kt-c-who", "kt-c-call", "kt-c-out", "kt-c-dur"]) {
    const span = document.createElement("span");
    span.className = cls;
    el.appendChild(span);
  }
  return el;
}

function renderRow(el, entry) {
  if (!entry) return;
  const [time, node, whoEl, call, out, dur] = el.children;
  time.textContent = formatTime(entry.time);
  node.textContent = entry.node || "";
  whoEl.textContent = who(entry);
  whoEl.title = entry.name ? `${entry.name} ${entry.pid}` : entry.pid || "";
  const text = entryText(entry);
  call.textContent = text;
  call.style.paddingLeft = `${(entry.depth || 0) * 16}px`;
  call.title = text;
  const outcome = entryOutcome(entry);
  out.textContent = outcome;
  out.title = outcome;
  dur.textContent = formatDuration(entry.duration);
  el.dataset.kind = entry.kind;
  el.classList.toggle("kt-row-exception", entry.exception != null);
  el.classList.toggle("kt-row-pending", entry.kind === "call" && entry.result == null && entry.exception == null);
  el.classList.toggle("kt-row-other", entry.kind !== "call");
  el.dataset.id = String(entry.id);
}
