// The trace widget's header: the status, the counters, the controls (pause/resume, clear,
// stop, the export menu) and the pattern editor. It draws a TraceState and reports the
// user's actions to its callbacks; it sends nothing itself.

import { PatternEditor } from "./patterns.js";
import { summaryEl } from "./trace_summary.js";
import { counterItems } from "./trace_state.js";
import { h, button } from "./dom.js";

export const STATUS_LABELS = {
  running: "Running",
  paused: "Paused",
  stopped: "Stopped",
  limit_reached: "Limit reached",
  timeout: "Timed out",
};

export class HeaderView {
  /**
   * @param {object} opts patterns (the editor's first lines), trace (what it traces: the
   *   pattern editor only for calls; the targets of messages and processes) and the
   *   callbacks onPause(), onClear(), onStop(), onApply(patterns), onComplete(text, seq),
   *   onDownload(), onCopy()
   */
  constructor({ patterns, trace = { calls: true }, onPause, onClear, onStop, onApply, onComplete, onDownload, onCopy }) {
    this.trace = trace;
    this.statusEl = h("span", { class: "kt-status", "data-testid": "status" });
    this.countersEl = h("span", { class: "kt-counters", "data-testid": "counters" });
    this.pauseButton = button("Pause", "pause", onPause);
    this.clearButton = button("Clear", "clear", onClear);
    this.stopButton = button("Stop", "stop", onStop);
    this.exportButton = button("Export", "export", () => this.toggleMenu());
    this.menu = h(
      "div",
      { class: "kt-menu", hidden: "" },
      button("Download JSON", "download-json", () => (this.closeMenu(), onDownload()), "kt-menu-item"),
      button("Copy as text", "copy-text", () => (this.closeMenu(), onCopy()), "kt-menu-item")
    );
    this.exportWrap = h("div", { class: "kt-menu-wrap" }, this.exportButton, this.menu);
    const top = h(
      "div",
      { class: "kt-top" },
      h("div", { class: "kt-title" }, h("span", { class: "kt-logo", text: "Trace" }), this.statusEl),
      this.countersEl,
      h("div", { class: "kt-controls" }, this.pauseButton, this.clearButton, this.stopButton, this.exportWrap)
    );
    this.el = h("div", { class: "kt-header" }, top);
    const summary = summaryEl(trace);
    if (summary) this.el.append(summary);
    this.editor = trace.calls ? new PatternEditor(this.el, { patterns, onApply, onComplete }) : null;
    this.flashTimer = null;
  }

  /** Closes the export menu on a click elsewhere in the page. */
  listen(doc) {
    doc.addEventListener("click", (e) => {
      if (!this.menu.hidden && !e.composedPath().includes(this.exportWrap)) this.closeMenu();
    });
  }

  /** Draws the status, the counters and which controls are enabled. */
  render(state) {
    const status = state.shownStatus;
    this.statusEl.textContent = STATUS_LABELS[status] || status;
    this.statusEl.dataset.status = status;
    this.countersEl.replaceChildren(...counterItems(state.counters, state.held.length, this.trace).map(counterEl));
    const paused = state.paused;
    this.pauseButton.textContent = paused ? "Resume" : "Pause";
    this.pauseButton.dataset.action = paused ? "resume" : "pause";
    this.pauseButton.disabled = state.ended;
    this.stopButton.disabled = state.ended;
    if (this.editor) this.editor.applyButton.disabled = state.ended;
  }

  toggleMenu() {
    this.menu.hidden = !this.menu.hidden;
  }

  closeMenu() {
    this.menu.hidden = true;
  }

  /** Shows `text` on the export button for a moment. */
  flash(text) {
    this.exportButton.textContent = text;
    clearTimeout(this.flashTimer);
    this.flashTimer = setTimeout(() => (this.exportButton.textContent = "Export"), 1500);
  }
}

/** One counter of counterItems/3 as the header shows it. */
function counterEl(item) {
  const el = h("span", {
    class: "kt-counter" + (item.muted ? " kt-muted" : "") + (item.bad ? " kt-bad" : ""),
    "data-counter": item.counter,
    title: item.title,
  });
  if (item.value != null) el.append(h("b", { text: item.value }));
  if (item.label) el.append(item.label);
  if (item.note) el.append(h("span", { class: "kt-muted", text: item.note }));
  return el;
}
