// @vitest-environment jsdom
// The trace widget as Livebook runs it (main.js's init on a ctx): the header follows the
// pause state machine, and the widget reaches the server only through ctx's handleEvent
// and pushEvent.
import { describe, it, expect } from "vitest";
import { init } from "../src/main.js";

function fakeCtx() {
  const handlers = {};
  const used = new Set();
  const ctx = {
    root: document.createElement("div"),
    pushed: [],
    importCSS: async () => {},
    handleEvent: (e, f) => (handlers[e] = f),
    pushEvent: (e, p) => ctx.pushed.push([e, p]),
  };
  document.body.replaceChildren(ctx.root);
  // what the widget asks of ctx
  const proxy = new Proxy(ctx, { get: (target, key) => (used.add(key), target[key]) });
  return { ctx: proxy, raw: ctx, used, emit: (e, p) => handlers[e](p) };
}

let nextId = 1;
const calls = (n) =>
  Array.from({ length: n }, (_, i) => ({ id: nextId++, kind: "call", mfa: "M.f/1", call: `M.f(${i})`, pid: "#PID<0.1.0>", node: "a@h", depth: 0, time: 1_700_000_000_000_000 + i }));

async function open(data = {}) {
  const t = fakeCtx();
  await init(t.ctx, { patterns: ["M.f/1"], status: "running", counters: { events: 0 }, events: calls(2), ...data });
  const $ = (sel) => t.raw.root.querySelector(sel);
  return { ...t, $, widget: t.raw.root.__kinoTrace, status: () => $(".kt-status").textContent, counters: () => $(".kt-counters").textContent };
}

describe("TraceWidget", () => {
  // issue 25 item 3: parts a narrow log can leave out, and the node of a remote process
  it("splits a row's time and pid into parts and badges a remote process with its short node", async () => {
    const [local, remote] = calls(2);
    const w = await open({ events: [local, { ...remote, pid: "#PID<13204.2465.0>", node: "livebook@127.0.0.1", remote: true }] });
    const rows = [...w.raw.root.querySelectorAll(".kt-vlist [data-id]")];
    const parts = (el) => [...el.childNodes].map((n) => n.textContent);
    expect(parts(rows[0].querySelector(".kt-c-time"))).toEqual([expect.stringMatching(/^\d\d:\d\d:$/), expect.stringMatching(/^\d\d\.\d{3}$/), "000"]);
    expect(parts(rows[0].querySelector(".kt-who-text"))).toEqual(["#PID", "<0.1.0>"]);
    expect(rows[0].querySelector(".kt-node-badge").hidden).toBe(true);
    const badge = rows[1].querySelector(".kt-node-badge");
    expect([badge.hidden, badge.textContent]).toEqual([false, "livebook"]);
    expect(rows[1].querySelector(".kt-c-who").title).toBe("#PID<13204.2465.0> livebook@127.0.0.1");
  });

  // issue 25 item 3: an empty Duration column keeps no room
  it("has no Duration or Result column until an event has one", async () => {
    const w = await open();
    const log = w.$(".kt-log");
    const empty = () => ["kt-no-durations", "kt-no-outcomes"].map((c) => log.classList.contains(c));
    expect(empty()).toEqual([true, true]);
    w.emit("events", { events: [{ id: nextId++, kind: "send", pid: "#PID<0.1.0>", data: ":hi", peer: "#PID<0.2.0>" }] });
    expect(empty()).toEqual([true, false]);
    const [c] = w.widget.model.all();
    w.emit("events", { events: [{ id: nextId++, kind: "return", mfa: "M.f/1", call_id: c.id, result: ":ok", duration: 1200, pid: c.pid, depth: 0 }] });
    expect(empty()).toEqual([false, false]);
    w.emit("clear", {});
    expect(empty()).toEqual([true, true]);
  });

  // issue 25 item 2
  it("says on hover what the header's events and the Log's count each count", async () => {
    const w = await open({ counters: { events: 4 } });
    expect(w.$('[data-counter="events"]').title).toMatch(/^4 trace events received/);
    expect(w.$('[data-tab="log"] .kt-tab-count').title).toBe("2 rows in the log: a call and its return share one row (the header counts them as two events)");
  });

  it("marks a row whose process lost events just before it, and says why", async () => {
    const w = await open({ events: [...calls(1), { ...calls(1)[0], lost: true }] });
    const rows = [...w.raw.root.querySelectorAll("[data-id]")];
    expect(rows.map((r) => r.classList.contains("kt-row-lost"))).toEqual([false, true]);
    expect(rows[1].querySelector(".kt-c-call").title).toContain("were dropped just before this one");
  });

  // issue 39 item 5
  it("pause freezes the view and asks nothing of the server; counters keep counting; resume catches up", async () => {
    const w = await open();
    expect(w.widget.model.size).toBe(2);
    expect(w.$('[data-action="pause"]').title).toContain("goes on recording");
    w.$('[data-action="pause"]').click();
    expect(w.raw.pushed).toEqual([]);
    expect(w.status()).toBe("View paused");
    w.emit("events", { events: calls(3), counters: { events: 5 } });
    expect(w.widget.model.size).toBe(2);
    expect(w.counters()).toBe("5 events0/s0 calls dropped3 held while paused");
    w.$('[data-action="resume"]').click();
    expect(w.raw.pushed).toEqual([]);
    expect(w.widget.model.size).toBe(5);
    expect([w.status(), w.counters(), w.$('[data-action="pause"]').textContent]).toEqual(["Running", "5 events0/s0 calls dropped", "Pause"]);
  });

  it("the menu beside Pause pauses and resumes tracing on the server", async () => {
    const w = await open();
    w.$('[data-action="pause-menu"]').click();
    expect(w.$('[data-action="pause-tracing"]').title).toContain("not traced");
    w.$('[data-action="pause-tracing"]').click();
    expect(w.raw.pushed).toEqual([["pause", {}]]);
    w.emit("status", { status: "paused" });
    expect(w.status()).toBe("Tracing paused");
    w.emit("events", { events: calls(1) }); // on their way before the pause: shown
    expect(w.widget.model.size).toBe(3);
    w.$('[data-action="resume-tracing"]').click();
    expect(w.raw.pushed).toEqual([["pause", {}], ["resume", {}]]);
    w.emit("status", { status: "running" });
    expect([w.status(), w.$('[data-action="pause-tracing"]').textContent]).toEqual(["Running", "Pause tracing"]);
  });

  it("a reload while tracing is paused shows rows as they come and offers to resume tracing", async () => {
    const w = await open({ status: "paused" });
    expect([w.status(), w.$('[data-action="resume-tracing"]').textContent]).toEqual(["Tracing paused", "Resume tracing"]);
    w.emit("events", { events: calls(1) });
    expect(w.widget.model.size).toBe(3);
    w.$('[data-action="resume-tracing"]').click();
    expect(w.raw.pushed).toEqual([["resume", {}]]);
  });

  it("the end of the trace shows what was held and disables the controls", async () => {
    const w = await open();
    w.$('[data-action="pause"]').click();
    w.emit("events", { events: calls(4) });
    w.emit("status", { status: "limit_reached", counters: { events: 6, limit: 6 } });
    expect(w.widget.model.size).toBe(6);
    expect(w.status()).toBe("Limit reached");
    expect(w.$('[data-action="pause"]').disabled).toBe(true);
    expect(w.$('[data-action="stop"]').disabled).toBe(true);
    expect(w.counters()).toBe("6 events0/s0 calls droppedlimit 6");
  });

  it("typing a pattern asks the server to complete it and shows its answer", async () => {
    const w = await open();
    const textarea = w.$(".kt-editor-input");
    textarea.focus();
    textarea.value = "M.f/1\n:ets.ins";
    textarea.setSelectionRange(textarea.value.length, textarea.value.length);
    textarea.dispatchEvent(new Event("input", { bubbles: true }));
    expect(w.raw.pushed).toEqual([["complete", { text: ":ets.ins", seq: 1 }]]);
    w.emit("completions", { seq: 1, prefix: "ins", items: [{ label: "insert/2", insert: "insert/2", kind: "function", detail: ":ets.insert/2" }] });
    expect(w.$(".kt-complete li .kt-complete-label").textContent).toBe("insert/2");
    textarea.dispatchEvent(new KeyboardEvent("keydown", { key: "Tab", bubbles: true, cancelable: true }));
    expect(textarea.value).toBe("M.f/1\n:ets.insert/2");
    expect(w.$(".kt-complete").hidden).toBe(true);
  });

  it("reaches the server only through ctx's handleEvent and pushEvent", async () => {
    const w = await open();
    w.$('[data-action="clear"]').click();
    w.$('[data-action="stop"]').click();
    w.$(".kt-vlist .kt-row").click();
    expect(w.raw.pushed.map(([e]) => e)).toEqual(["clear", "stop", "get_term"]);
    expect([...w.used].filter((k) => typeof k === "string").sort()).toEqual(["handleEvent", "importCSS", "pushEvent", "root"]);
  });

  it("Copy as Mermaid asks the server for the rows in view and copies its reply", async () => {
    const pid = "#PID<0.1.0>";
    const peer = "#PID<0.2.0>";
    const send = { id: 900, kind: "send", pid, peer, data: ":ping", node: "a@h", time: 1, depth: 0 };
    const recv = { id: 901, kind: "receive", pid: peer, data: ":ping", node: "a@h", time: 2, depth: 0 };
    const w = await open({ events: [send, recv] });
    expect(w.$('[data-action="copy-mermaid"]').hidden).toBe(true);
    w.$('[data-tab="sequence"]').click();
    const copy = w.$('[data-action="copy-mermaid"]');
    expect(copy.hidden).toBe(false);

    const written = [];
    Object.defineProperty(navigator, "clipboard", { value: { writeText: async (text) => written.push(text) }, configurable: true });
    try {
      copy.click();
      expect(w.raw.pushed).toEqual([["get_mermaid", { ids: [900, 901] }]]);
      await w.widget.mermaidReply({ source: "sequenceDiagram\n", events: 2 });
      expect(written).toEqual(["sequenceDiagram\n"]);
      expect(copy.textContent).toBe("Copied 2 events");
      await w.widget.mermaidReply({ error: "these events are no longer kept" });
      expect(copy.textContent).toBe("these events are no longer kept");

      // refused (no clipboard, no execCommand in jsdom): shown selected, to copy by hand
      navigator.clipboard.writeText = async () => {
        throw new Error("NotAllowedError");
      };
      await w.widget.mermaidReply({ source: "sequenceDiagram\n  Note over P1: x\n", events: 1 });
      const area = w.$('[data-testid="mermaid-box"] textarea');
      expect(area.value).toBe("sequenceDiagram\n  Note over P1: x\n");
      expect([area.selectionStart, area.selectionEnd]).toEqual([0, area.value.length]);
      w.$('[data-action="close-mermaid"]').click();
      expect(w.$('[data-testid="mermaid-box"]')).toBe(null);
    } finally {
      delete navigator.clipboard;
    }
  });

  it("Copy as Mermaid with nothing in view says so and asks nothing", async () => {
    const w = await open({ events: [] });
    w.$('[data-tab="sequence"]').click();
    w.$('[data-action="copy-mermaid"]').click();
    expect(w.raw.pushed).toEqual([]);
    expect(w.$('[data-action="copy-mermaid"]').textContent).toBe("Nothing in view");
  });
});
