// The trace widget: header (status, counters, controls, pattern editor), five tabs (log,
// sequence, stats, calls, flame) and the details of the selected item. This module wires the
// parts together and runs the tabs:
//
//   Kino's ctx <--> Transport (transport.js): server events in, requests out
//                      |
//                  TraceWidget (here)
//                      |
//      +---------------+------------------+---------------------------------------+
//      |               |                  |                                       |
//   TraceState      LogModel,          views: HeaderView, LogView, DetailView,    export.js
//   (status,        SequenceLayout     SequenceView, StatsTable, CallTree,        (and the
//   counters,       (the data)         FlameView, the Mermaid fallback box        clipboard)
//   view pause)
//
// Only the Transport talks to the server; the state and the data know no DOM; the views
// report the user's actions to callbacks given here.
//
// A recorder's snapshot clicked in its panel (recorder_panel.js) shows in the usual tabs:
// a TraceWidget of its own, on a ViewTransport (the server's "view" events), the widget a
// trace from Kino.Trace.open/1 has, in place of the live header and tabs until "Back to
// the live recorder".

import { LogModel } from "./model.js";
import { TraceState } from "./trace_state.js";
import { HeaderView } from "./header_view.js";
import { LogView } from "./log_view.js";
import { DetailView } from "./detail_view.js";
import { StatsTable, STATS_COLUMNS } from "./stats_table.js";
import { latencyColumns, withLatency, latencyDrill } from "./latency_view.js";
import { FlameView } from "./flame_view.js";
import { SlowCallsView, slowColumn } from "./slow_calls_view.js";
import { CallTree } from "./call_tree.js";
import { SequenceLayout, SequenceView, detailEntry } from "./sequence.js";
import { exportData, exportText, downloadJson, copyText } from "./export.js";
import { RecorderPanel } from "./recorder_panel.js";
import { ViewTransport } from "./view_transport.js";
import { h, button } from "./dom.js";
import { formatCount } from "./format.js";

const TABS = [
  ["log", "Log"],
  ["sequence", "Sequence"],
  ["stats", "Stats"],
  ["calls", "Calls"],
  ["flame", "Flame"],
];
// The Flame tab asks the server for its data at most once in FLAME_MS while it shows.
const FLAME_MS = 1000;
// The Stats tab's columns: the log's figures with the server's latency distributions
// ("latency" pushes) before the maximum.
const TRACE_STATS_COLUMNS = STATS_COLUMNS.flatMap((col) => (col.key === "max" ? [...latencyColumns({ max: false }), col] : [col]));
const MAX_TERMS = 200;
// During a flood (pushes of BIG_BATCH events or more), the views are drawn at most once
// in RENDER_MS, in an animation frame: the data take every push at once (cheap), the
// drawing does not (issue 39 item 12: a push drew the log even behind another tab, and
// every push drew the header and the tab, so a tab switch waited behind them).
const RENDER_MS = 100;
const BIG_BATCH = 200;
const nextFrame = (fn) => (typeof requestAnimationFrame === "function" ? requestAnimationFrame(fn) : setTimeout(fn, 16));
const LOG_COUNT_TITLE = "rows in the log: a call and its return share one row (the header counts them as two events)";

export class TraceWidget {
  /**
   * @param {Transport} server the link to Kino.Trace.Widget
   * @param {object} data the connect payload (assets/wire.schema.json): patterns, trace
   *   (what it traces: calls, the targets of messages and processes), status,
   *   counters, events, and how many log entries (max_entries) and sequence rows
   *   (sequence_rows) to hold
   */
  constructor(server, data) {
    this.server = server;
    this.model = new LogModel({ maxEntries: data.max_entries });
    this.sequence = new SequenceLayout({ maxRows: data.sequence_rows });
    this.state = new TraceState({ status: data.status, counters: data.counters, maxHeld: this.model.maxEntries });
    this.patterns = data.patterns || [];
    this.trace = data.trace || { calls: true };
    this.tab = "log";
    this.terms = new Map(); // id -> full terms ("get_term" replies), the latest MAX_TERMS
    this.selected = null; // the entry shown in the details
    this.selectedFrom = null; // the tab it was selected in
    this.dirty = { log: true, stats: true, calls: true, sequence: true }; // tabs to redraw
    this.renderAt = 0; // when the views were last drawn after a push
    this.renderPending = false; // a drawing is due in the next animation frame
    this.sequenceAt = 0; // when the sequence, stats and calls tabs were last drawn
    this.statsAt = 0;
    this.callsAt = 0;
    this.sequenceTimer = null; // a pending sequence redraw
    this.latency = new Map(); // mfa -> the "latency" payload's row (distributions in µs)
    this.flameProcess = null; // the process the Flame tab shows (null: all)
    this.flameStale = true; // events came since the Flame tab's data was asked for
    this.flameAt = -Infinity;
    this.flameTimer = null;

    this.build(server.root);
    this.show(this.state.receive(data.events || []));
    this.renderStatus();

    server.on("events", ({ events, counters }) => {
      if (counters) this.state.setCounters(counters);
      const shown = this.state.receive(events);
      if (shown.length) this.append(shown);
      this.requestRender((events || []).length >= BIG_BATCH);
      if (shown.length) this.requestFlame();
    });
    server.on("latency", ({ rows }) => {
      this.latency = new Map((rows || []).map((row) => [row.mfa, row]));
      this.dirty.stats = true;
      // (at most once a second: drawn now)
      if (this.tab === "stats") this.renderTabContent(true);
    });
    server.on("flame", (payload) => this.flame.setData(payload));
    server.on("slow_calls", (payload) => this.slowCalls.render(payload));
    // a recorder's panel (recorder_panel.js): pushed at the first tick, then when it changes
    server.on("recorder", (payload) => this.recorder.render(payload));
    server.on("snapshot", (reply) => this.showSnapshot(reply));
    server.on("view", (message) => this.snapshotView && this.snapshotView.transport.receive(message));
    server.on("snapshot_file", (reply) => this.recorder.download(reply));
    server.on("counters", (counters) => {
      this.state.setCounters(counters);
      this.renderStatus();
    });
    server.on("status", ({ status, counters }) => {
      this.show(this.state.serverStatus(status, counters));
      this.renderStatus();
    });
    server.on("patterns", (payload) => {
      this.patterns = payload.patterns;
      if (this.header.editor) this.header.editor.showResults(payload);
    });
    server.on("completions", (reply) => this.header.editor && this.header.editor.showCompletions(reply));
    server.on("clear", () => this.clearLocal());
    server.on("mermaid", (reply) => this.mermaidReply(reply));
    server.on("term", (term) => {
      this.terms.set(term.id, term);
      if (this.terms.size > MAX_TERMS) this.terms.delete(this.terms.keys().next().value);
      this.renderDetail();
    });
  }

  // --- building ---------------------------------------------------------------------

  build(root) {
    root.classList.add("kino-trace");
    this.root = h("div", { class: "kt-root" });

    this.header = new HeaderView({
      patterns: this.patterns,
      trace: this.trace,
      onPause: () => this.togglePause(),
      onPauseTracing: () => this.server.push(this.state.tracingPaused ? "resume" : "pause"),
      onClear: () => this.server.push("clear"),
      onStop: () => this.server.push("stop"),
      onApply: (patterns) => this.server.push("set_patterns", { patterns }),
      onComplete: (text, seq) => this.server.push("complete", { text, seq }),
      onDownload: () => downloadJson(this.exportData()),
      onCopy: () => this.copyText(),
    });

    // tabs
    this.tabButtons = {};
    const tabs = h("div", { class: "kt-tabs", role: "tablist" });
    for (const [key, label] of TABS) {
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
    this.followButton = button(
      "↓ Latest",
      "follow",
      () => (this.tab === "sequence" ? this.sequenceView.scrollToEnd() : this.log.list.scrollToEnd()),
      "kt-button kt-follow"
    );
    this.mermaidButton = button("Copy as Mermaid", "copy-mermaid", () => this.copyMermaid(), "kt-button kt-mermaid");
    this.mermaidButton.title = "Copy the rows in view as a Mermaid sequence diagram";
    this.mermaidTimer = null;
    tabs.append(h("div", { class: "kt-tabs-spacer" }), this.mermaidButton, this.followButton, this.filterInput);

    // panels
    this.log = new LogView(this.model, { onSelect: (entry) => this.select(entry) });
    this.log.list.scroller.addEventListener("scroll", () => this.renderFollow());
    this.detail = new DetailView({ onClose: () => this.closeDetail() });
    this.sequencePanel = h("div", { class: "kt-panel", "data-panel": "sequence", hidden: "" });
    this.sequenceView = new SequenceView(this.sequencePanel, {
      layout: this.sequence,
      onSelect: (row) => this.select(detailEntry(row), "sequence"),
      onShowCalls: () => this.showTab("calls"),
    });
    this.sequenceView.scroller.addEventListener("scroll", () => this.renderFollow());
    this.statsPanel = h("div", { class: "kt-panel", "data-panel": "stats", hidden: "" });
    this.stats = new StatsTable(this.statsPanel, {
      columns: [...TRACE_STATS_COLUMNS, slowColumn((mfa) => this.showSlowCalls(mfa))],
      detail: (row) => (this.latency.has(row.mfa) ? latencyDrill(this.latency.get(row.mfa)) : h("div", { class: "kt-muted", text: "No call of it has returned yet." })),
    });
    this.slowCalls = new SlowCallsView(this.statsPanel);
    this.callsPanel = h("div", { class: "kt-panel", "data-panel": "calls", hidden: "" });
    this.calls = new CallTree(this.callsPanel);
    this.flamePanel = h("div", { class: "kt-panel", "data-panel": "flame", hidden: "" });
    this.flame = new FlameView(this.flamePanel, {
      onProcess: (pid) => {
        this.flameProcess = pid;
        this.requestFlame(true);
      },
    });

    this.recorder = new RecorderPanel(null, {
      onOpen: (id) => this.server.push("open_snapshot", { id }),
      onBack: () => this.closeSnapshot(),
      onDownload: (id) => this.server.push("get_snapshot_file", { id }),
    });
    this.snapshotView = null; // { transport, widget }: a snapshot shown in the tabs
    // the live trace's tabs (hidden while a snapshot shows in their place)
    this.live = h("div", { class: "kt-live", "data-testid": "live" }, tabs, this.log.el, this.sequencePanel, this.statsPanel, this.callsPanel, this.flamePanel, this.detail.el);
    this.root.append(this.header.el, this.recorder.el, this.live);
    root.appendChild(this.root);
    this.unlisten = this.header.listen(document);
    this.showTab("log");
  }

  // --- a recorder's snapshot in the tabs ---------------------------------------------

  /**
   * Shows a "snapshot" reply (the snapshot the panel asked for): its own widget, from its
   * connect payload, in place of the live header and tabs; or the server's error.
   */
  showSnapshot(reply) {
    // (an answer to an earlier click, or for a snapshot no longer asked for)
    if (reply.id == null || reply.id !== this.recorder.openId) return;
    if (reply.error != null) {
      this.closeSnapshot();
      return this.recorder.showError(reply.error);
    }
    this.dropSnapshotView();
    const el = h("div", { class: "kt-snapshot-view", "data-testid": "snapshot-view", "data-snapshot-id": String(reply.id) });
    this.root.appendChild(el);
    const transport = new ViewTransport(this.server, reply.id, el);
    this.snapshotView = { transport, widget: new TraceWidget(transport, reply.view) };
    this.header.el.hidden = true;
    this.live.hidden = true;
    this.recorder.shown(reply.id);
  }

  /** Back to the live recorder. */
  closeSnapshot() {
    this.dropSnapshotView();
    this.recorder.closed();
    if (!this.live.hidden) return;
    this.header.el.hidden = false;
    this.live.hidden = false;
    // (drawn while hidden: measured again)
    this.showTab(this.tab);
  }

  dropSnapshotView() {
    if (!this.snapshotView) return;
    this.snapshotView.widget.dispose();
    this.snapshotView.transport.root.remove();
    this.snapshotView = null;
  }

  /** Stops what this widget started outside itself: its listeners and timers. */
  dispose() {
    this.dropSnapshotView();
    this.unlisten();
    for (const timer of [this.flameTimer, this.sequenceTimer, this.mermaidTimer]) clearTimeout(timer);
  }

  // --- data -------------------------------------------------------------------------

  /** Adds events to the log and the sequence, and draws them. */
  show(events) {
    if (!events.length) return;
    this.append(events);
    this.afterChange();
  }

  /** Adds events to the data; the views are drawn later (afterChange, requestRender). */
  append(events) {
    this.model.append(events);
    this.sequence.append(events);
    this.dirty.log = this.dirty.stats = this.dirty.calls = this.dirty.sequence = true;
    this.flameStale = true;
  }

  /**
   * Asks the server for the Flame tab's data when it shows and events came since it last
   * asked (or `now`), at most once in FLAME_MS; the reply ("flame") draws it.
   */
  requestFlame(now = false) {
    if (this.tab !== "flame" || (!now && !this.flameStale)) return;
    const wait = now ? 0 : FLAME_MS - (performance.now() - this.flameAt);
    if (wait > 0) {
      if (!this.flameTimer) this.flameTimer = setTimeout(() => ((this.flameTimer = null), this.requestFlame()), wait);
      return;
    }
    clearTimeout(this.flameTimer);
    this.flameTimer = null;
    this.flameAt = performance.now();
    this.flameStale = false;
    this.server.push("get_flame", { process: this.flameProcess });
  }

  /**
   * Draws after a push: now, unless it is a flood's (`busy`) and the views were drawn less
   * than RENDER_MS ago; then once, in a coming animation frame, for every push until then.
   */
  requestRender(busy) {
    if (this.renderPending) return;
    if (busy && performance.now() - this.renderAt < RENDER_MS) {
      this.renderPending = true;
      nextFrame(() => {
        this.renderPending = false;
        this.render();
      });
      return;
    }
    this.render();
  }

  render() {
    this.renderAt = performance.now();
    if (this.dirty.log) this.drawViews();
    this.renderStatus();
  }

  /** The data changed (all of it may have): draws the views. */
  afterChange() {
    this.dirty.log = this.dirty.stats = this.dirty.calls = this.dirty.sequence = true;
    this.drawViews();
  }

  drawViews() {
    // the log behind another tab is drawn when it shows
    if (this.tab === "log") this.renderLog();
    this.renderTabContent();
    this.renderCounts();
    this.renderFollow();
  }

  renderLog() {
    this.log.update();
    this.dirty.log = false;
  }

  clearLocal() {
    this.model.clear();
    this.sequence.clear();
    this.sequenceView.selected = null;
    this.state.clear();
    this.terms.clear();
    this.latency = new Map();
    this.flame.setData({ nodes: [] });
    this.selected = null;
    this.detail.el.hidden = true;
    this.model.setFilter(this.filterInput.value);
    this.afterChange();
    this.renderStatus();
  }

  applyFilter() {
    this.model.setFilter(this.filterInput.value);
    this.log.list.follow = true;
    this.afterChange();
  }

  /** The view's pause: nothing is asked of the server, which goes on recording. */
  togglePause() {
    this.show(this.state.toggle());
    this.renderStatus();
  }

  renderStatus() {
    this.header.render(this.state);
  }

  /** Asks for a function's slow calls (the Stats tab's "Slowest" link); the reply draws them. */
  showSlowCalls(mfa) {
    this.slowCalls.loading(mfa);
    this.server.push("get_slow_calls", { mfa });
  }

  // --- tabs -------------------------------------------------------------------------

  showTab(tab) {
    this.tab = tab;
    for (const [key, b] of Object.entries(this.tabButtons)) {
      b.classList.toggle("kt-tab-active", key === tab);
      b.setAttribute("aria-selected", String(key === tab));
    }
    this.log.el.hidden = tab !== "log";
    this.sequencePanel.hidden = tab !== "sequence";
    this.detail.el.hidden = !this.selected || this.selectedFrom !== tab;
    this.statsPanel.hidden = tab !== "stats";
    this.callsPanel.hidden = tab !== "calls";
    this.flamePanel.hidden = tab !== "flame";
    this.filterInput.hidden = tab !== "log";
    this.followButton.hidden = tab !== "log" && tab !== "sequence";
    this.mermaidButton.hidden = tab !== "sequence" || this.sequence.callsOnly;
    if (tab === "log") {
      if (this.dirty.log) this.renderLog();
      else this.log.list.update();
    }
    this.renderTabContent(true);
    if (tab === "flame") {
      this.flame.draw();
      this.requestFlame(true);
    }
  }

  renderTabContent(force = false) {
    const now = performance.now();
    if (this.tab === "sequence" && this.dirty.sequence) {
      // at most ~10 redraws a second; the last change is always drawn
      clearTimeout(this.sequenceTimer);
      const wait = force ? 0 : 100 - (now - this.sequenceAt);
      if (wait <= 0) {
        this.sequenceView.render();
        this.dirty.sequence = false;
        this.sequenceAt = now;
      } else {
        this.sequenceTimer = setTimeout(() => this.renderTabContent(true), wait);
      }
    }
    if (this.tab === "stats" && this.dirty.stats && (force || now - this.statsAt > 250)) {
      this.stats.render(
        this.model.statsRows().map((row) => {
          const latency = this.latency.get(row.mfa);
          return { ...withLatency(row, latency?.latency), slow: latency ? latency.slow : null };
        })
      );
      this.dirty.stats = false;
      this.statsAt = now;
    }
    if (this.tab === "calls" && this.dirty.calls && (force || now - this.callsAt > 500)) {
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
    // the header counts trace events; the log counts its rows (a call and its return are
    // two events and one row): each number says what it counts on hover
    this.tabButtons.log.lastChild.title = `${m.filtered ? `${m.viewLength} of ` : ""}${m.size} ${LOG_COUNT_TITLE}`;
    this.tabButtons.stats.lastChild.textContent = m.stats.size ? formatCount(m.stats.size) : "";
    this.tabButtons.sequence.lastChild.textContent = this.sequence.messages ? formatCount(this.sequence.messages) : "";
    this.root.classList.toggle("kt-multi-node", m.nodes.size > 1);
  }

  renderFollow() {
    if (this.tab === "sequence") this.mermaidButton.hidden = this.sequence.callsOnly;
    const away =
      this.tab === "sequence"
        ? !this.sequenceView.follow && this.sequence.end > this.sequence.start && !this.sequence.callsOnly
        : !this.log.list.follow && this.model.viewLength > 0;
    this.followButton.classList.toggle("kt-visible", away);
  }

  // --- export -----------------------------------------------------------------------

  exportData() {
    return exportData({ status: this.state.status, patterns: this.patterns, counters: this.state.counters, entries: this.model.all() });
  }

  exportText() {
    return exportText(this.model.all());
  }

  async copyText() {
    await copyText(this.exportText());
    this.header.flash(`Copied ${formatCount(this.model.size)} entries`);
  }

  // "Copy as Mermaid": the server makes the diagram of the events in view (it has their
  // terms whole); the reply is copied, or shown selected when the browser refuses.

  copyMermaid() {
    const ids = this.sequenceView.idsInView();
    if (!ids.length) return this.flashMermaid("Nothing in view");
    this.server.push("get_mermaid", { ids });
  }

  async mermaidReply({ source, events, error }) {
    if (error) return this.flashMermaid(error);
    if (await copyText(source)) this.flashMermaid(`Copied ${formatCount(events)} events`);
    else this.showMermaid(source);
  }

  flashMermaid(text) {
    this.mermaidButton.textContent = text;
    clearTimeout(this.mermaidTimer);
    this.mermaidTimer = setTimeout(() => (this.mermaidButton.textContent = "Copy as Mermaid"), 2000);
  }

  /** The diagram in a box over the sequence, selected, to copy by hand. */
  showMermaid(source) {
    if (this.mermaidBox) this.mermaidBox.remove();
    const area = h("textarea", { class: "kt-mermaid-text kt-mono", readonly: "", rows: "10", "aria-label": "Mermaid diagram" });
    area.value = source;
    const close = button("Close", "close-mermaid", () => {
      this.mermaidBox.remove();
      this.mermaidBox = null;
    });
    this.mermaidBox = h(
      "div",
      { class: "kt-mermaid-box", "data-testid": "mermaid-box" },
      h("div", { class: "kt-mermaid-note", text: "The browser did not let the widget copy: the diagram is selected, copy it with Ctrl+C (⌘C)." }),
      area,
      close
    );
    this.sequencePanel.prepend(this.mermaidBox);
    area.focus();
    area.select();
  }

  // --- details ----------------------------------------------------------------------

  select(entry, from = "log") {
    if (!entry) return;
    this.selected = entry;
    this.selectedFrom = from;
    for (const id of [entry.id, entry.returnId, entry.receiveId]) {
      if (id != null && !this.terms.has(id)) this.server.push("get_term", { id });
    }
    this.renderDetail();
  }

  renderDetail() {
    if (!this.selected) return;
    this.detail.render(this.selected, this.terms);
    this.detail.el.hidden = this.selectedFrom !== this.tab;
  }

  closeDetail() {
    this.selected = null;
    this.log.list.selected = null;
    this.log.list.render();
    this.sequenceView.selected = null;
    this.sequenceView.draw();
    this.detail.el.hidden = true;
  }
}
