// @vitest-environment jsdom
// The slow calls a Stats tab row links to (src/slow_calls_view.js, issue 38.2): the
// "Slowest" column's link, the "get_slow_calls" request it pushes, and the "slow_calls"
// reply drawn under the table (duration, process, call, result or exception, call tree).
import { describe, it, expect } from "vitest";
import { slowColumn, slowCallTree, SlowCallsView } from "../src/slow_calls_view.js";
import { init } from "../src/main.js";

const pid = "#PID<0.1.0>";
const dist = (over = {}) => ({
  count: 2, unknown: 0, min: 900, p50: 1000, p90: 1900, p99: 2000, p999: 2000, max: 2100,
  histogram: [[900, 1], [2000, 1]],
  exceptions: { count: 0, p50: null, p99: null, max: null },
  ...over,
});
const row = (over) => ({ id: 1, kind: "call", pid, node: "a@h", name: null, depth: 0, time: 1, mfa: "M.f/1", call: null, result: null, exception: null, call_id: null, duration: null, ...over });
// M.f(1) -> M.g() -> :ok, at depth 3 in its process
const events = [
  row({ id: 10, kind: "call", call: "M.f(1)", depth: 3 }),
  row({ id: 11, kind: "call", mfa: "M.g/0", call: "M.g()", depth: 4 }),
  row({ id: 12, kind: "return", mfa: "M.g/0", result: ":ok", call_id: 11, duration: 400_000, depth: 4 }),
  row({ id: 13, kind: "return", result: ":done", call_id: 10, duration: 9_000_000, depth: 3 }),
];
const slow = (over = {}) => ({
  call_id: 10, end_id: 13, duration: 9_000_000, pid,
  call: events[0], end: events[3], events, events_cut: false, ...over,
});
const reply = (over = {}) => ({ key: "M.f/1", from: "trace", slowest: [slow()], slowest_omitted: 0, slower_than: [], slower_than_omitted: 0, over: 0, left_out: 0, ...over });

describe("slow_calls_view", () => {
  it("the link: a count when the trace keeps them, 'find' when it keeps none, none without ended calls", () => {
    const opened = [];
    const col = slowColumn((mfa) => opened.push(mfa));
    expect(col.render({ mfa: "M.f/1", slow: 3 }).textContent).toBe("3");
    expect(col.render({ mfa: "M.f/1", slow: 0 }).textContent).toBe("–");
    expect(col.render({ mfa: "M.f/1", slow: null, latency: dist() }).textContent).toBe("find");
    expect(col.render({ mfa: "M.f/1", slow: null, latency: null }).textContent).toBe("–");
    col.render({ mfa: "M.f/1", slow: 3 }).click();
    expect(opened).toEqual(["M.f/1"]);
  });

  it("a slow call's events as call trees, from its own depth", () => {
    const roots = slowCallTree(events);
    expect(roots.length).toBe(1);
    expect(roots[0].entry.call).toBe("M.f(1)");
    expect(roots[0].entry.result).toBe(":done");
    expect(roots[0].children.map((c) => [c.entry.call, c.entry.result, c.entry.duration])).toEqual([["M.g()", ":ok", 400_000]]);
  });

  it("draws each call: duration, process, call, outcome; its call tree on demand; an exception; a call without events", () => {
    const parent = document.createElement("div");
    const view = new SlowCallsView(parent);
    view.loading("M.f/1");
    expect(view.el.hidden).toBe(false);
    expect(view.el.textContent).toContain("loading");
    const failed = slow({ call_id: 20, duration: 2_000_000, end: row({ id: 21, kind: "exception", exception: "** (ArgumentError) bad", call_id: 20 }), events: null });
    view.render(reply({ slowest: [slow(), failed], slowest_omitted: 3 }));
    const items = [...view.el.querySelectorAll(".kt-slow-call")];
    expect(items.map((li) => li.dataset.callId)).toEqual(["10", "20"]);
    const first = items[0].querySelector(".kt-slow-line").textContent;
    expect(first).toContain("9 ms");
    expect(first).toContain(pid);
    expect(first).toContain("M.f(1)");
    expect(first).toContain("-> :done");
    expect(view.el.textContent).toContain("3 more not shown");
    expect(items[1].querySelector(".kt-exception").textContent).toBe("** (ArgumentError) bad");
    expect(items[1].textContent).toContain("no longer in the trace");
    const tree = items[0].querySelector("details");
    expect(tree.querySelector(".kt-tree-list")).toBe(null);
    tree.open = true;
    tree.dispatchEvent(new Event("toggle"));
    expect([...tree.querySelectorAll(".kt-call")].map((e) => e.textContent)).toEqual(["M.f(1)", "M.g()"]);
    // a late reply for another function is not drawn over this one
    view.render(reply({ key: "M.other/0", slowest: [] }));
    expect(view.el.querySelectorAll(".kt-slow-call").length).toBe(2);
    view.el.querySelector('[data-action="close-slow-calls"]').click();
    expect(view.el.hidden).toBe(true);
  });

  it("calls over the threshold, with the counts of those not shown", () => {
    const view = new SlowCallsView(document.createElement("div"));
    view.render(reply({ slowest: [], slower_than: [slow()], slower_than_omitted: 4, over: 30, left_out: 2 }));
    expect(view.el.textContent).toContain("Over the threshold: the newest 1");
    expect(view.el.textContent).toContain("4 older not shown");
    view.render(reply({ slowest: [], from: "events" }));
    expect(view.el.textContent).toContain("No slow call of it is kept");
    expect(view.el.textContent).toContain("events the widget keeps");
  });
});

describe("the trace widget's Stats tab links to the slow calls", () => {
  it("the link asks the server for the row's slow calls, without opening its drill-down, and draws the reply", async () => {
    const handlers = {};
    const pushed = [];
    const root = document.createElement("div");
    document.body.replaceChildren(root);
    const ctx = { root, importCSS: async () => {}, handleEvent: (e, f) => (handlers[e] = f), pushEvent: (e, p) => pushed.push([e, p]) };
    await init(ctx, { patterns: ["M.f/1"], status: "running", counters: { events: 4 }, events });
    root.querySelector('[data-tab="stats"]').click();
    handlers.latency({ rows: [{ mfa: "M.f/1", latency: dist(), processes: [], processes_omitted: 0, slow: 2 }], rows_omitted: 0 });
    const heads = [...root.querySelectorAll(".kt-stats th")].map((th) => th.textContent);
    expect(heads.at(-1)).toBe("Slowest");
    const link = root.querySelector('.kt-stats tr[data-key="M.f/1"] [data-action="slow-calls"]');
    expect(link.textContent).toBe("2");
    link.click();
    expect(pushed.filter(([e]) => e === "get_slow_calls")).toEqual([["get_slow_calls", { mfa: "M.f/1" }]]);
    expect(root.querySelector(".kt-drill")).toBe(null);
    handlers.slow_calls(reply());
    expect(root.querySelector('[data-testid="slow-calls"]').hidden).toBe(false);
    expect(root.querySelectorAll(".kt-slow-call").length).toBe(1);
    // a later latency push redraws the table, not the slow calls shown
    handlers.latency({ rows: [{ mfa: "M.f/1", latency: dist(), processes: [], processes_omitted: 0, slow: 3 }], rows_omitted: 0 });
    expect(root.querySelector('[data-action="slow-calls"]').textContent).toBe("3");
    expect(root.querySelectorAll(".kt-slow-call").length).toBe(1);
  });
});
