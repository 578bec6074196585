// The trace widget: header (status, counters, controls, pattern editor) and four tabs
// (log, sequence, stats, calls). It talks to the server only through `ctx` (Kino's JS API):
// ctx.handleEvent for what the server sends, ctx.pushEvent for requests.

import { LogModel } from "./model.js";
import { VirtualList } from "./virtual_list.js";
import { StatsTable } from "./stats_table.js";
import { CallTree } from "./call_tree.js";
import { SequenceLayout, SequenceView, detailEntry } from "./sequence.js";
import { PatternEditor } from "./patterns.js";
import { h } from "./dom.js";
import {
  formatTime,
  formatDuration,
  formatCount,
  formatRate,
  who,
  whoWithNode,
  kindLook,
  eventBody,
  isMessageKind,
  isNormalExit,
  peerLabel,
  entryText,
  entryOutcome,
  entryLine,
  callerText,
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


export class TraceWidget {
  constructor(ctx, data) {
    this.ctx = ctx;
    this.model = new LogModel({ maxEntries: data.max_entries || 200_000 });
    this.sequence = new SequenceLayout({ maxRows: data.sequence_rows || 4000 });
    this.status = data.status || "running";
    this.counters = data.counters || {};
    this.patterns = data.patterns || [];
    this.frozen = false; // the user pressed pause: incoming rows wait in `held`
    this.held = [];
    this.tab = "log";
    this.terms = new Map();
    this.selected = null;
    this.dirty = { stats: true, calls: true, sequence: true };

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
    for (const [key, label] of [["log", "Log"], ["sequence", "Sequence"], ["stats", "Stats"], ["calls", "Calls"]]) {
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
    this.followButton = this.button(
      "↓ Latest",
      "follow",
      () => (this.tab === "sequence" ? this.sequenceView.scrollToEnd() : this.list.scrollToEnd()),
      "kt-button kt-follow"
    );
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
    // details of the selected log row or sequence item, below the panel
    this.detailEl = h("div", { class: "kt-detail", hidden: "", "data-testid": "detail" });

    // sequence panel
    this.sequencePanel = h("div", { class: "kt-panel", "data-panel": "sequence", hidden: "" });
    this.sequenceView = new SequenceView(this.sequencePanel, {
      layout: this.sequence,
      onSelect: (row) => this.select(detailEntry(row), "sequence"),
    });
    this.sequenceView.scroller.addEventListener("scroll", () => this.renderFollow());

    // stats and calls panels
    this.statsPanel = h("div", { class: "kt-panel", "data-panel": "stats", hidden: "" });
    this.stats = new StatsTable(this.statsPanel);
    this.callsPanel = h("div", { class: "kt-panel", "data-panel": "calls", hidden: "" });
    this.calls = new CallTree(this.callsPanel);

    this.root.append(header, tabs, this.logPanel, this.sequencePanel, this.statsPanel, this.callsPanel, this.detailEl);
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
    this.sequence.append(events);
    this.afterChange();
  }

  afterChange() {
    this.list.update();
    this.emptyEl.hidden = this.model.viewLength > 0;
    this.emptyEl.textContent = this.model.filter ? "No entry matches the filter." : "Waiting for calls…";
    this.dirty.stats = this.dirty.calls = this.dirty.sequence = true;
    this.renderTabContent();
    this.renderCounts();
    this.renderFollow();
  }

  clearLocal() {
    this.model.clear();
    this.sequence.clear();
    this.sequenceView.selected = null;
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
      this.sequence.append(held);
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
    this.sequencePanel.hidden = tab !== "sequence";
    this.detailEl.hidden = !this.selected || this.selectedFrom !== tab;
    this.statsPanel.hidden = tab !== "stats";
    this.callsPanel.hidden = tab !== "calls";
    this.filterInput.hidden = tab !== "log";
    this.followButton.hidden = tab !== "log" && tab !== "sequence";
    if (tab === "log") this.list.update();
    this.renderTabContent(true);
  }

  renderTabContent(force = false) {
    const now = performance.now();
    if (this.tab === "sequence" && this.dirty.sequence) {
      // at most ~10 redraws a second; the last change is always drawn
      clearTimeout(this.sequenceTimer);
      const wait = force ? 0 : 100 - (now - (this.sequenceAt || 0));
      if (wait <= 0) {
        this.sequenceView.render();
        this.dirty.sequence = false;
        this.sequenceAt = now;
      } else {
        this.sequenceTimer = setTimeout(() => this.renderTabContent(true), wait);
      }
    }
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
    this.tabButtons.sequence.lastChild.textContent = this.sequence.messages ? formatCount(this.sequence.messages) : "";
    this.root.classList.toggle("kt-multi-node", m.nodes.size > 1);
  }

  renderFollow() {
    const away =
      this.tab === "sequence"
        ? !this.sequenceView.follow && this.sequence.end > this.sequence.start
        : !this.list.follow && this.model.viewLength > 0;
    this.followButton.classList.toggle("kt-visible", away);
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
    if (c.stack_guarded) {
      parts.push(
        h("span", {
          class: "kt-counter kt-muted",
          "data-counter": "stack-guarded",
          title: "Processes whose stack kept growing under return tracing: their calls are still traced, their returns no longer",
          text: `${formatCount(c.stack_guarded)} ${c.stack_guarded === 1 ? "process" : "processes"} without returns`,
        })
      );
    }
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

  select(entry, from = "log") {
    if (!entry) return;
    this.selected = entry;
    this.selectedFrom = from;
    for (const id of [entry.id, entry.returnId, entry.receiveId]) {
      if (id != null && !this.terms.has(id)) this.ctx.pushEvent("get_term", { id });
    }
    this.renderDetail();
  }

  renderDetail() {
    const entry = this.selected;
    if (!entry) return;
    const call = this.terms.get(entry.id);
    const ret = entry.returnId != null ? this.terms.get(entry.returnId) : entry.kind !== "call" ? call : null;

    const look = isMessageKind(entry.kind) ? kindLook(entry.kind) : null;
    const title = h(
      "div",
      { class: "kt-detail-title" },
      look ? kindBadge(entry) : "",
      h("span", { class: "kt-mono kt-call", text: look ? detailHeadline(entry) : entry.mfa || entry.kind }),
      h("span", { class: "kt-muted kt-mono", text: look ? [formatTime(entry.time), entry.remote && entry.node].filter(Boolean).join(" · ") : `${whoWithNode(entry)} · ${formatTime(entry.time)}` }),
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
          this.sequenceView.selected = null;
          this.sequenceView.draw();
          this.detailEl.hidden = true;
        },
      })
    );
    const sections = [];
    const section = (label, text, cls = "") =>
      sections.push(h("div", { class: "kt-detail-label", text: label }), h("pre", { class: `kt-term ${cls}`, text }));
    const loading = "loading…";

    if (entry.kind === "call" && entry.caller) {
      sections.push(h("dl", { class: "kt-facts" }, h("dt", { text: "Called from" }), h("dd", { class: "kt-mono kt-caller", text: entry.caller })));
    }
    if (entry.kind === "call") {
      if (call && call.args) call.args.forEach((arg, i) => section(`Argument ${i + 1}`, arg));
      else if (call && call.error) section("Arguments", call.error, "kt-muted");
      else section("Call", entry.call || loading);
    }
    if (entry.result != null) section("Returned", ret ? ret.result ?? ret.error : entry.result);
    if (entry.exception != null) section("Raised", ret ? ret.exception ?? ret.error : entry.exception, "kt-exception");
    if (look) {
      const full = call && call.data != null ? call.data : call && call.error ? call.error : entry.data;
      if (entry.data != null) section(DATA_LABELS[entry.kind] || "Data", full ?? loading, entry.kind === "exit" && !isNormalExit(entry.data) ? "kt-exception" : "");
      const facts = messageFacts(entry);
      if (facts.length) {
        sections.push(
          h("dl", { class: "kt-facts" }, ...facts.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { class: "kt-mono", text: v })]))
        );
      }
    } else if (entry.data != null) section("Data", (ret && ret.data) || entry.data);
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
    this.detailEl.hidden = this.selectedFrom !== this.tab;
  }
}

// --- message and process events ---------------------------------------------------------

const DATA_LABELS = {
  send: "Message",
  send_to_non_existing: "Message",
  receive: "Message",
  exit: "Reason",
  spawn: "Function",
  spawned: "Function",
  register: "Name",
  unregister: "Name",
};

function kindBadge(entry) {
  const look = kindLook(entry.kind);
  const tone = entry.kind === "exit" && !isNormalExit(entry.data) ? "bad" : look.tone;
  return h("span", { class: `kt-kind kt-tone-${tone}`, "data-kind": entry.kind }, h("span", { class: "kt-kind-icon", text: look.icon }), look.label);
}

function detailHeadline(entry) {
  if (entry.kind === "send" || entry.kind === "send_to_non_existing") return `${who(entry)} → ${peerLabel(entry)}`;
  if (entry.kind === "spawn") return `${who(entry)} spawned ${peerLabel(entry)}`;
  if (entry.peer) return `${who(entry)} · ${peerLabel(entry)}`;
  return who(entry);
}

/** Facts about a message or process event for the detail panel: [label, value]. */
function messageFacts(entry) {
  const facts = [];
  if (entry.kind === "send" || entry.kind === "send_to_non_existing") {
    facts.push(["From", [entry.name, entry.pid].filter(Boolean).join(" ")]);
    facts.push(["To", [entry.peer_name, entry.peer].filter(Boolean).join(" ")]);
    facts.push(["Sent", formatTime(entry.time)]);
    if (entry.received != null) {
      const later = entry.received - entry.time;
      facts.push(["Received", `${formatTime(entry.received)} (${later > 0 ? `${formatDuration(later * 1000)} later` : "within the same µs"})`]);
    } else if (entry.kind === "send_to_non_existing") facts.push(["Received", "never: no such process"]);
  } else if (entry.peer) {
    facts.push([entry.kind === "spawn" ? "Child" : entry.kind === "spawned" ? "Parent" : "Other process", [entry.peer_name, entry.peer].filter(Boolean).join(" ")]);
  }
  if (entry.remote && entry.node) facts.push(["Node", entry.node]);
  return facts;
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
  // the call cell: a kind badge (message and process events) and the text
  const call = el.children[3];
  const badge = document.createElement("span");
  badge.className = "kt-kind";
  const icon = document.createElement("span");
  icon.className = "kt-kind-icon";
  badge.append(icon, document.createTextNode(""));
  const text = document.createElement("span");
  text.className = "kt-c-text";
  call.append(badge, text);
  return el;
}

function renderRow(el, entry) {
  if (!entry) return;
  const [time, node, whoEl, call, out, dur] = el.children;
  time.textContent = formatTime(entry.time);
  node.textContent = entry.node || "";
  whoEl.textContent = whoWithNode(entry);
  whoEl.title = [entry.name, entry.pid, entry.node].filter(Boolean).join(" ");
  const [badge, textEl] = call.children;
  const look = entry.kind === "call" ? null : kindLook(entry.kind);
  const message = isMessageKind(entry.kind);
  if (message) {
    const tone = entry.kind === "exit" && !isNormalExit(entry.data) ? "bad" : look.tone;
    badge.className = `kt-kind kt-tone-${tone}`;
    badge.firstChild.textContent = look.icon;
    badge.lastChild.textContent = look.label;
    badge.hidden = false;
  } else if (!badge.hidden) {
    badge.hidden = true;
    badge.firstChild.textContent = badge.lastChild.textContent = "";
  }
  const text = message ? eventBody(entry) : entryText(entry);
  textEl.textContent = text;
  call.style.paddingLeft = message ? "" : `${(entry.depth || 0) * 16}px`;
  call.title = [entryText(entry), callerText(entry)].filter(Boolean).join("\n");
  const outcome = entryOutcome(entry);
  out.textContent = outcome;
  out.title = outcome;
  dur.textContent = formatDuration(entry.duration);
  el.dataset.kind = entry.kind;
  el.classList.toggle("kt-row-exception", entry.exception != null);
  el.classList.toggle("kt-row-pending", entry.kind === "call" && entry.result == null && entry.exception == null);
  el.classList.toggle("kt-row-other", entry.kind !== "call" && !message);
  el.classList.toggle("kt-row-message", message);
  el.dataset.id = String(entry.id);
}
