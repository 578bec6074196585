// What a trace traces besides calls, in the header where a trace of calls has its
// pattern editor: "Messages of :counter — only {:ok, _}", "Process events of :all". A
// trace of messages or processes alone has no call patterns to edit, so it shows this
// and no editor (the connect payload's `trace`, Kino.Trace.Plan.summary/1).

import { h } from "./dom.js";

/**
 * The lines to show: [{kind, label, targets, note}] for the messages and the processes a
 * trace follows (none for a trace of calls alone).
 */
export function summaryItems(trace) {
  const items = [];
  if (!trace) return items;
  if (trace.messages != null) {
    items.push({
      kind: "messages",
      label: "Messages of",
      targets: trace.messages,
      note: trace.message_pattern ? `only ${trace.message_pattern}` : "every message",
    });
  }
  if (trace.processes != null) {
    items.push({ kind: "processes", label: "Process events of", targets: trace.processes, note: "spawns, exits, links, names" });
  }
  return items;
}

/** The summary as an element, or null when there is nothing to say. */
export function summaryEl(trace) {
  const items = summaryItems(trace);
  if (!items.length) return null;
  return h(
    "div",
    { class: "kt-trace-summary", "data-testid": "trace-summary" },
    ...items.map((item) =>
      h(
        "div",
        { class: "kt-trace-summary-item", "data-kind": item.kind, title: `${item.label} ${item.targets}: ${item.note}` },
        h("span", { class: "kt-trace-summary-label", text: item.label }),
        h("code", { class: "kt-trace-summary-targets kt-mono", text: item.targets }),
        h("span", { class: "kt-trace-summary-note" + (item.note.startsWith("only ") ? " kt-mono" : ""), text: item.note })
      )
    )
  );
}
