// The slow calls a Stats tab row links to (issue 38.2): the "Slowest" column's link
// asks the server for a function's slow calls ("get_slow_calls"); its reply
// ("slow_calls", KinoTrace.Widget.SlowPayload.reply/4) shows under the table: per call
// its duration, process, the call with its arguments and how it ended (result or
// exception), and its call tree when the trace still had it. Durations are in ns.

import { h, button } from "./dom.js";
import { LogModel } from "./model.js";
import { renderList } from "./call_tree.js";
import { formatCount, formatDuration, entryOutcome, functionLabel } from "./format.js";

/**
 * The "Slowest" column of a stats table: a row's link to its slow calls, calling
 * `onOpen(mfa)`. Its figure is the row's `slow` (how many the trace keeps, from the
 * "latency" push): a count when the trace keeps them, "find" when it keeps none and
 * calls of the function ended (the server then looks in the events the widget keeps).
 */
export function slowColumn(onOpen) {
  return {
    key: "slow",
    label: "Slowest",
    numeric: true,
    title: "The function's slowest calls, whole: arguments, result, duration, process and call tree",
    render: (row) => {
      const kept = row.slow != null;
      if (kept ? row.slow === 0 : !row.latency || row.latency.count + row.latency.exceptions.count === 0) return h("span", { class: "kt-muted", text: "–" });
      return h("button", {
        class: "kt-link kt-slow-link",
        type: "button",
        "data-action": "slow-calls",
        title: kept ? `The ${row.slow} slow calls the trace keeps` : "Find its slowest calls in the events the widget keeps",
        text: kept ? formatCount(row.slow) : "find",
        // (the row's own click opens its drill-down)
        onclick: (event) => {
          event.stopPropagation();
          onOpen(row.mfa);
        },
      });
    },
  };
}

/**
 * A slow call's events as call trees: [{entry, children}] (returns paired with their
 * calls, depths from the slow call's own).
 */
export function slowCallTree(events) {
  if (!events || !events.length) return [];
  const base = events[0].depth || 0;
  const model = new LogModel({ maxEntries: events.length + 1 });
  model.append(events.map((e) => ({ ...e, depth: Math.max(0, (e.depth || 0) - base) })));
  const trees = model.callTrees(events.length);
  return trees.length ? trees[0].roots : [];
}

export class SlowCallsView {
  /** @param {HTMLElement} parent  @param {object} opts onClose() */
  constructor(parent, { onClose } = {}) {
    this.key = null;
    this.el = h("div", { class: "kt-slow", "data-testid": "slow-calls", hidden: "" });
    this.onClose = onClose;
    parent.appendChild(this.el);
  }

  /** Shows that `key`'s slow calls were asked for. */
  loading(key) {
    this.key = key;
    this.el.hidden = false;
    this.el.replaceChildren(this.head(key, "loading…"));
    this.el.scrollIntoView?.({ block: "nearest" });
  }

  /** Draws a "slow_calls" reply (one for another function than the last asked is ignored). */
  render(payload) {
    if (this.key != null && payload.key !== this.key) return;
    this.key = payload.key;
    this.el.hidden = false;
    const from = payload.from === "trace" ? "kept by the trace since its start" : "the slowest among the events the widget keeps";
    const parts = [this.head(payload.key, from)];
    const slowest = payload.slowest || [];
    const over = payload.slower_than || [];
    if (slowest.length) {
      const more = payload.slowest_omitted ? ` (${formatCount(payload.slowest_omitted)} more not shown)` : "";
      parts.push(h("div", { class: "kt-slow-section kt-muted", text: `The ${slowest.length} slowest, slowest first${more}` }), this.list(slowest));
    }
    if (over.length) {
      const notes = [];
      if (payload.slower_than_omitted) notes.push(`${formatCount(payload.slower_than_omitted)} older not shown`);
      if (payload.left_out) notes.push(`${formatCount(payload.left_out)} of all functions not kept by the trace`);
      const more = notes.length ? ` (${notes.join("; ")})` : "";
      parts.push(h("div", { class: "kt-slow-section kt-muted", text: `Over the threshold: the newest ${over.length}, oldest first${more}` }), this.list(over));
    }
    if (!slowest.length && !over.length) parts.push(h("div", { class: "kt-empty", text: "No slow call of it is kept." }));
    this.el.replaceChildren(...parts);
  }

  close() {
    this.key = null;
    this.el.hidden = true;
    this.el.replaceChildren();
    if (this.onClose) this.onClose();
  }

  head(key, note) {
    return h(
      "div",
      { class: "kt-drill-title kt-slow-head" },
      h("span", { text: "Slow calls of " }),
      h("span", { class: "kt-mono", text: key }),
      h("span", { class: "kt-muted", text: ` · ${note}` }),
      button("Close", "close-slow-calls", () => this.close(), "kt-button kt-slow-close")
    );
  }

  list(calls) {
    return h("ul", { class: "kt-slow-list" }, ...calls.map((c) => this.item(c)));
  }

  item(c) {
    const outcome = entryOutcome(c.end);
    const line = h(
      "div",
      { class: "kt-tree-line kt-slow-line" },
      h("span", { class: "kt-duration kt-slow-duration", text: formatDuration(c.duration) }),
      h("span", { class: "kt-mono kt-muted", text: c.call.name || c.pid || "" }),
      h("span", { class: "kt-mono kt-call", text: c.call.call || `${functionLabel(c.call)} (arguments not kept)` }),
      outcome ? h("span", { class: c.end.exception != null ? "kt-mono kt-exception" : "kt-mono kt-result", text: outcome }) : ""
    );
    const li = h("li", { class: "kt-slow-call", "data-call-id": String(c.call_id) }, line);
    if (c.events == null) {
      li.appendChild(h("div", { class: "kt-muted kt-slow-note", text: "Its call tree is no longer in the trace." }));
    } else if (c.events.length > 2) {
      const calls = c.events.filter((e) => e.kind === "call").length;
      const tree = h("details", { class: "kt-slow-tree" }, h("summary", { class: "kt-muted", text: `call tree: ${calls} calls${c.events_cut ? " (events beneath it cut)" : ""}` }));
      tree.addEventListener("toggle", () => {
        if (tree.open && !tree.querySelector(".kt-tree-list")) tree.appendChild(renderList(slowCallTree(c.events)));
      });
      li.appendChild(tree);
    }
    return li;
  }
}
