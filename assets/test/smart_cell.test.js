// @vitest-environment jsdom
import { describe, it, expect, vi, beforeEach, afterEach } from "vitest";
import { TraceCellForm, MODE_FIELDS, shows, processChoices, shownProcesses, displayValue } from "../src/smart_cell.js";

const FORM = {
  mode: "calls",
  patterns: "Enum.map/2",
  processes: "all",
  targets: "",
  return: true,
  exceptions: true,
  caller: false,
  match: "",
  limit: null,
  rate_count: null,
  rate_period: 1000,
  nodes: "local",
  node_names: "",
  timeout: null,
};

// A stand-in for the Transport: records pushes, delivers server events.
function fakeServer() {
  const handlers = new Map();
  return {
    root: document.createElement("div"),
    pushed: [],
    sync: null,
    on(event, fn) {
      handlers.set(event, fn);
      return this;
    },
    onSync(fn) {
      this.sync = fn;
      return this;
    },
    push(event, payload) {
      this.pushed.push({ event, payload });
    },
    emit(event, payload) {
      handlers.get(event)(payload);
    },
  };
}

function open(form = {}, check = null) {
  const server = fakeServer();
  document.body.replaceChildren(server.root);
  const cell = new TraceCellForm(server, { form: { ...FORM, ...form }, modes: ["calls", "messages", "processes", "stats"], check });
  return { server, cell, $: (sel) => server.root.querySelector(sel), $$: (sel) => [...server.root.querySelectorAll(sel)] };
}

const visibleRows = ($$) => $$(".kt-sc-row").filter((r) => !r.hidden).map((r) => r.querySelector(".kt-sc-label").textContent);

describe("smart cell form", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("each mode shows its parts only", () => {
    expect(shows("calls", "flags")).toBe(true);
    expect(shows("stats", "limits")).toBe(false);
    expect(shows("stats", "nodes")).toBe(true);
    expect(Object.keys(MODE_FIELDS)).toEqual(["calls", "messages", "processes", "stats", "record"]);

    const { server, $$ } = open();
    expect(visibleRows($$)).toEqual(["Patterns", "Processes", "Record", "Stop or drop", "Nodes"]);
    server.emit("update", { mode: "messages" });
    expect(visibleRows($$)).toEqual(["Processes", "Only messages", "Stop or drop", "Nodes"]);
    server.emit("update", { mode: "processes" });
    expect(visibleRows($$)).toEqual(["Processes", "Stop or drop", "Nodes"]);
    server.emit("update", { mode: "stats" });
    expect(visibleRows($$)).toEqual(["Patterns", "Processes", "Nodes"]);
    server.emit("update", { mode: "record" });
    expect(visibleRows($$)).toEqual(["Patterns", "Processes", "Record", "Snapshot on", "Keep", "Stop or drop", "Nodes"]);
  });

  it("Record mode: its triggers and ring are fields, pushed as updates, checked by the server", () => {
    const { server, $ } = open({ mode: "record", on_exception: false, slower_than: null, on_match: "", ring_events: null, after: null }, null);
    const onException = $('input[data-field="on_exception"]');
    onException.checked = true;
    onException.dispatchEvent(new Event("change"));
    for (const [field, value] of [["slower_than", "200"], ["on_match", "Enum.smu(x)"], ["ring_events", "5000"], ["after", "10"]]) {
      const input = $(`input[data-field="${field}"]`);
      input.value = value;
      input.dispatchEvent(new Event("change"));
    }
    expect(server.pushed.map((p) => p.payload)).toEqual([
      { field: "on_exception", value: true },
      { field: "slower_than", value: "200" },
      { field: "on_match", value: "Enum.smu(x)" },
      { field: "ring_events", value: "5000" },
      { field: "after", value: "10" },
    ]);
    server.emit("check", { patterns: null, processes: null, nodes: null, match: null, on_match: "did you mean Enum.sum/1?" });
    const error = $('[data-error="on_match"]');
    expect(error.hidden).toBe(false);
    expect(error.textContent).toContain("did you mean Enum.sum/1?");
    server.emit("check", { patterns: null, processes: null, nodes: null, match: null, on_match: null });
    expect(error.hidden).toBe(true);
  });

  it("'messages between nodes' is a messages preset; elsewhere it shows as all processes", () => {
    expect(processChoices("messages").map(([v]) => v)).toContain("distributed");
    expect(processChoices("calls").map(([v]) => v)).not.toContain("distributed");
    expect(shownProcesses("calls", "distributed")).toBe("all");

    const { $, server } = open({ mode: "messages", processes: "distributed" });
    const option = $('select[data-field="processes"] option[value="distributed"]');
    expect(option.hidden).toBe(false);
    expect($('select[data-field="processes"]').value).toBe("distributed");
    server.emit("update", { mode: "calls" });
    expect(option.hidden).toBe(true);
    expect($('select[data-field="processes"]').value).toBe("all");
  });

  it("a mode button, a select, a checkbox and a number push an update each", () => {
    const { server, $ } = open();
    $('button[data-mode="stats"]').click();
    const processes = $('select[data-field="processes"]');
    processes.value = "some";
    processes.dispatchEvent(new Event("change"));
    const caller = $('input[data-field="caller"]');
    caller.checked = true;
    caller.dispatchEvent(new Event("change"));
    const limit = $('input[data-field="limit"]');
    limit.value = "1000";
    limit.dispatchEvent(new Event("change"));

    expect(server.pushed).toEqual([
      { event: "update", payload: { field: "mode", value: "stats" } },
      { event: "update", payload: { field: "processes", value: "some" } },
      { event: "update", payload: { field: "caller", value: true } },
      { event: "update", payload: { field: "limit", value: "1000" } },
    ]);
    // the names input shows once "these processes" is chosen
    expect($('input[data-field="targets"]').hidden).toBe(false);
    expect($('button[data-mode="stats"]').getAttribute("aria-pressed")).toBe("true");
  });

  it("patterns are sent once typing pauses, and at once when Livebook syncs before evaluating", () => {
    const { server, cell } = open();
    const textarea = cell.patternsTextarea;
    expect(textarea.dataset.complete).toBe("patterns");

    for (const text of ["E", "En", "Enum.sum/1"]) {
      textarea.value = text;
      textarea.dispatchEvent(new Event("input"));
      vi.advanceTimersByTime(100);
    }
    const updates = () => server.pushed.filter((p) => p.event === "update");
    expect(updates()).toEqual([]);
    vi.advanceTimersByTime(300);
    expect(updates()).toEqual([{ event: "update", payload: { field: "patterns", value: "Enum.sum/1" } }]);

    textarea.value = "Enum.sum/1\n:ets";
    textarea.dispatchEvent(new Event("input"));
    server.sync();
    expect(updates().at(-1)).toEqual({ event: "update", payload: { field: "patterns", value: "Enum.sum/1\n:ets" } });
    vi.advanceTimersByTime(1000);
    expect(updates().length).toBe(2);
  });

  it("the server's check marks bad pattern lines inline and shows field errors", () => {
    const { server, $, $$ } = open({ patterns: "Enum.map/2\nEnum.mpa/2", processes: "some", targets: ":nobody" });
    server.emit("check", {
      patterns: {
        patterns: ["Enum.map/2", "Enum.mpa/2"],
        results: [
          { input: "Enum.map/2", ok: true, error: null, warning: null },
          { input: "Enum.mpa/2", ok: false, error: "did you mean Enum.map/2?", warning: null },
        ],
      },
      processes: "no process is registered as :nobody",
      nodes: null,
      match: null,
    });
    expect($$(".kt-editor-line").map((l) => l.classList.contains("kt-line-error"))).toEqual([false, true]);
    expect($(".kt-editor-messages").textContent).toContain("line 2");
    expect($(".kt-editor-messages").textContent).toContain("did you mean Enum.map/2?");
    expect($('[data-error="processes"]').textContent).toBe("no process is registered as :nobody");

    server.emit("check", { patterns: { patterns: [], results: [{ input: "Enum.map/2", ok: true }] }, processes: null, nodes: null, match: null });
    expect($('[data-error="processes"]').hidden).toBe(true);
  });

  it("typing the patterns back to what the server has shows its check again, sending nothing", () => {
    const check = { patterns: { patterns: [], results: [{ input: "A.nope/1", ok: false, error: "no A.nope/1" }] }, processes: null, nodes: null, match: null };
    const { server, cell, $$ } = open({ patterns: "A.nope/1" }, check);
    expect($$(".kt-line-error").length).toBe(1);
    const textarea = cell.patternsTextarea;
    textarea.value = "A.nope/";
    textarea.dispatchEvent(new Event("input"));
    textarea.value = "A.nope/1";
    textarea.dispatchEvent(new Event("input"));
    expect($$(".kt-line-error").length).toBe(0);
    vi.advanceTimersByTime(400);
    expect(server.pushed.filter((p) => p.event === "update")).toEqual([]);
    expect($$(".kt-line-error").length).toBe(1);
  });

  it("completes the pattern line being typed, as the widget's editor does; an accepted item is sent", () => {
    const { server, cell, $ } = open({ patterns: "" });
    const textarea = cell.patternsTextarea;
    textarea.focus();
    textarea.value = ":ets.ins";
    textarea.setSelectionRange(8, 8);
    textarea.dispatchEvent(new Event("input"));
    const ask = server.pushed.find((p) => p.event === "complete");
    expect(ask.payload.text).toBe(":ets.ins");
    server.emit("completions", {
      seq: ask.payload.seq,
      prefix: "ins",
      items: [
        { label: "insert/2", insert: "insert/2", kind: "function" },
        { label: "insert_new/2", insert: "insert_new/2", kind: "function" },
      ],
    });
    expect($(".kt-complete").hidden).toBe(false);
    textarea.dispatchEvent(new KeyboardEvent("keydown", { key: "Tab", bubbles: true }));
    expect(textarea.value).toBe(":ets.insert/2");
    vi.advanceTimersByTime(400);
    expect(server.pushed.filter((p) => p.event === "update").at(-1).payload).toEqual({ field: "patterns", value: ":ets.insert/2" });
  });

  it("a refused value is shown; the next update of that field clears it", () => {
    const { server, $ } = open();
    server.emit("error", { field: "limit", message: "limit: expected a positive integer, got: \"-1\"" });
    expect($('[data-error="form"]').textContent).toContain("limit: expected a positive integer");
    server.emit("update", { limit: 5 });
    expect($('[data-error="form"]').hidden).toBe(true);
    expect($('input[data-field="limit"]').value).toBe("5");
  });

  it("updates from another browser fill the inputs", () => {
    const { server, $, cell } = open();
    server.emit("update", { patterns: ":ets.insert/2", timeout: 60000, nodes: "some", node_names: "a@b" });
    expect(cell.patternsTextarea.value).toBe(":ets.insert/2");
    expect($('input[data-field="timeout"]').value).toBe("60000");
    expect($('input[data-field="node_names"]').hidden).toBe(false);
    expect(displayValue(null)).toBe("");
  });
});
