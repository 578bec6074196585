// @vitest-environment jsdom
// The header shows the editor for what the trace has: call patterns for a trace of calls,
// the targets (and message pattern) of a trace of messages or processes, no call-pattern
// editor with its placeholder and Apply button where there are no calls (issue 25).
import { describe, it, expect } from "vitest";
import { init } from "../src/main.js";
import { summaryItems } from "../src/trace_summary.js";

async function open(trace) {
  const root = document.createElement("div");
  document.body.replaceChildren(root);
  const ctx = { root, importCSS: async () => {}, handleEvent: () => {}, pushEvent: () => {} };
  await init(ctx, { patterns: trace.calls ? ["M.f/1"] : [], trace, status: "running", counters: { events: 0 }, events: [] });
  return (sel) => root.querySelector(sel);
}

describe("what the trace traces", () => {
  it("summaryItems: messages with or without a pattern, processes, nothing for calls alone", () => {
    expect(summaryItems({ calls: true, messages: null, message_pattern: null, processes: null })).toEqual([]);
    expect(summaryItems({ calls: false, messages: ":counter", message_pattern: "{:ok, _}", processes: null })).toEqual([
      { kind: "messages", label: "Messages of", targets: ":counter", note: "only {:ok, _}" },
    ]);
    expect(summaryItems({ calls: false, messages: ":all", message_pattern: null, processes: ":new" }).map((i) => [i.kind, i.targets, i.note])).toEqual([
      ["messages", ":all", "every message"],
      ["processes", ":new", "spawns, exits, links, names"],
    ]);
  });

  it("a trace of calls has the pattern editor and no summary", async () => {
    const $ = await open({ calls: true, messages: null, message_pattern: null, processes: null });
    expect($(".kt-editor-input")).not.toBe(null);
    expect($('[data-action="apply-patterns"]')).not.toBe(null);
    expect($('[data-testid="trace-summary"]')).toBe(null);
  });

  it("a trace of messages shows its targets and pattern, no call-pattern editor", async () => {
    const $ = await open({ calls: false, messages: ":counter, #PID<0.1.0>", message_pattern: "{:ok, _}", processes: null });
    expect($(".kt-editor-input")).toBe(null);
    expect($('[data-action="apply-patterns"]')).toBe(null);
    expect($('[data-testid="trace-summary"]').textContent).toBe("Messages of:counter, #PID<0.1.0>only {:ok, _}");
  });

  it("a trace of calls and messages has both", async () => {
    const $ = await open({ calls: true, messages: ":all", message_pattern: null, processes: null });
    expect($(".kt-editor-input")).not.toBe(null);
    expect($('[data-testid="trace-summary"]').textContent).toContain("every message");
  });
});
