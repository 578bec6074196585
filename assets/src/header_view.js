// The trace widget's header: the status, the counters, the controls (pause/resume, clear,
// stop, the export menu) and the pattern editor. It draws a TraceState and reports the
// user's actions to its callbacks; it sends nothing itself.

import { PatternEditor } from "./patterns.js";
import { summaryEl } from "./trace_summary.js";
import { counterItems } from "./trace_state.js";
import { h, button } from "./dom.js";

export const STATUS_LABELS = {
  running: "Running",
  frozen: "View paused",
  paused: "Tracing paused",
  stopped: "Stopped",
  limit_reached: "Limit reached",
  timeout: "Timed out",
};

// What each pause does, on its button (issue 39 item 5).
export const PAUSE_TITLE =
  "Pause the view: the rows stay still while the trace goes on recording and the counters keep counting; Resume shows what arrived meanwhile";
export const RESUME_TITLE = "Resume the view: show the rows that arrived while it was paused, and follow again";
export const PAUSE_TRACING_TITLE = "Pause tracing: record nothing until resumed (calls made meanwhile are not traced)";
export const RESUME_TRACING_TITLE = "Resume tracing: record again";
const STATUS_TITLES = {
  frozen: "The trace is recording; this view is paused (Resume shows what arrived meanwhile)",
  paused: "Tracing is paused: nothing is recorded until it resumes",
};

export class HeaderView {
  /**
   * @param {object} opts patterns (the editor's first lines), trace (what it traces: the
   *   pattern editor only for calls; the targets of messages and processes) and the
   *   callbacks onPause() (the view's), onPauseTracing() (the trace's), onClear(), onStop(), onApply(patterns), onComplete(text, seq),
   *   onDownload(), onCopy()
   */
  constructor({ patterns, trace = { calls: true }, onPause, onPauseTracing, onClear, onStop, onApply, onComplete, onDownload, onCopy }) {
    this.trace = trace;
    this.statusEl = h("span", { class: "kt-status", "data-testid": "status" });
    this.countersEl = h("span", { class: "kt-counters", "data-testid": "counters" });
    // Pause is the view's; beside it, a menu with the trace's own pause (issue 39 item 5)
    this.pauseButton = button("Pause", "pause", onPause, "kt-button kt-split-main");
    this.tracingButton = button("Pause tracing", "pause-tracing", () => (this.closeMenus(), onPauseTracing()), "kt-menu-item");
    this.pauseMenuButton = button("▾", "pause-menu", () => this.toggleMenu(this.pauseMenu), "kt-button kt-split-more");
    this.pauseMenuButton.setAttribute("aria-label", "More ways to pause");
    this.pauseMenuButton.title = "More ways to pause";
    this.pauseMenu = h("div", { class: "kt-menu", hidden: "" }, this.tracingButton);
    this.pauseWrap = h("div", { class: "kt-menu-wrap kt-split" }, this.pauseButton, this.pauseMenuButton, this.pauseMenu);
    this.clearButton = button("Clear", "clear", onClear);
    this.stopButton = button("Stop", "stop", onStop);
    this.exportButton = button("Export", "export", () => this.toggleMenu(this.menu));
    this.menu = h(
      "div",
      { class: "kt-menu", hidden: "" },
      button("Download JSON", "download-json", () => (this.closeMenus(), onDownload()), "kt-menu-item"),
      button("Copy as text", "copy-text", () => (this.closeMenus(), onCopy()), "kt-menu-item")
    );
    this.exportWrap = h("div", { class: "kt-menu-wrap" }, this.exportButton, this.menu);
    const top = h(
      "div",
      { class: "kt-top" },
      h("div", { class: "kt-title" }, h("span", { class: "kt-logo", text: "Trace" }), this.statusEl),
      this.countersEl,
      h("div", { class: "kt-controls" }, this.pauseWrap, this.clearButton, this.stopButton, this.exportWrap)
    );
    this.el = h("div", { class: "kt-header" }, top);
    const summary = summaryEl(trace);
    if (summary) this.el.append(summary);
    this.editor = trace.calls ? new PatternEditor(this.el, { patterns, onApply, onComplete }) : null;
    this.flashTimer = null;
  }

  /** Closes a menu on a click elsewhere in the page. Returns what stops listening. */
  listen(doc) {
    const close = (e) => {
      const path = e.composedPath();
      if (!this.menu.hidden && !path.includes(this.exportWrap)) this.menu.hidden = true;
      if (!this.pauseMenu.hidden && !path.includes(this.pauseWrap)) this.pauseMenu.hidden = true;
    };
    doc.addEventListener("click", close);
    return () => doc.removeEventListener("click", close);
  }

  /** Draws the status, the counters and which controls are enabled. */
  render(state) {
    const status = state.shownStatus;
    this.statusEl.textContent = STATUS_LABELS[status] || status;
    this.statusEl.dataset.status = status;
    this.countersEl.replaceChildren(...counterItems(state.counters, state.held.length, this.trace).map(counterEl));
    this.statusEl.title = STATUS_TITLES[status] || "";
    const frozen = state.frozen;
    this.pauseButton.textContent = frozen ? "Resume" : "Pause";
    this.pauseButton.dataset.action = frozen ? "resume" : "pause";
    this.pauseButton.title = frozen ? RESUME_TITLE : PAUSE_TITLE;
    this.pauseButton.disabled = state.ended && !frozen;
    const tracing = state.tracingPaused;
    this.tracingButton.textContent = tracing ? "Resume tracing" : "Pause tracing";
    this.tracingButton.dataset.action = tracing ? "resume-tracing" : "pause-tracing";
    this.tracingButton.title = tracing ? RESUME_TRACING_TITLE : PAUSE_TRACING_TITLE;
    this.tracingButton.disabled = state.ended;
    this.pauseMenuButton.disabled = state.ended;
    this.stopButton.disabled = state.ended;
    if (this.editor) this.editor.applyButton.disabled = state.ended;
  }

  toggleMenu(menu) {
    const open = menu.hidden;
    this.closeMenus();
    menu.hidden = !open;
  }

  closeMenus() {
    this.menu.hidden = true;
    this.pauseMenu.hidden = true;
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
