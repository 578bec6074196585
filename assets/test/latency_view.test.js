// @vitest-environment jsdom
// Latency in the stats tables (src/latency_view.js) and the trace widget's Flame and
// Stats tabs fed by the server's "flame" and "latency" events (issue 38.1, 38.3).
import { describe, it, expect, vi } from "vitest";
import { histogram, latencyColumns, withLatency, latencyDrill } from "../src/latency_view.js";
import { init } from "../src/main.js";

const dist = (over = {}) => ({
  count: 4, unknown: 1, min: 900, p50: 1000, p90: 1900, p99: 2000, p999: 2000, max: 2100,
  histogram: [[900, 1], [1000, 2], [2000, 1]],
  exceptions: { count: 0, p50: null, p99: null, max: null },
  ...over,
});

describe("latency_view", () => {
  it("draws one bar per bucket, as tall as its count, with the counts on hover", () => {
    const el = histogram([[1, 1], [2, 4]], { width: 20, height: 8 });
    const bars = [...el.querySelectorAll("rect")].map((r) => Number(r.getAttribute("height")));
    expect(bars).toEqual([2, 8]);
    expect(el.querySelector("title").textContent).toBe("≥ 1 µs < 2 µs: 1\n≥ 2 µs: 4");
    expect(histogram([]).querySelectorAll("rect").length).toBe(0);
  });

  it("columns p50, p99, max and the distribution, sortable by the row's figures", () => {
    expect(latencyColumns().map((c) => c.label)).toEqual(["p50", "p99", "Max", "Distribution"]);
    expect(latencyColumns({ max: false }).map((c) => c.label)).toEqual(["p50", "p99", "Distribution"]);
    const row = withLatency({ mfa: "M.f/1" }, dist());
    expect([row.lat_p50, row.lat_p99, row.lat_max, row.lat_count]).toEqual([1000, 2000, 2100, 4]);
    expect(withLatency({ mfa: "M.f/1" }, null).lat_p50).toBe(null);
  });

  it("a function's distribution per process", () => {
    const el = latencyDrill({ mfa: "M.f/1", processes: [{ pid: "#PID<0.1.0>", latency: dist() }], processes_omitted: 3 });
    const cells = [...el.querySelectorAll("tbody td")].map((td) => td.textContent);
    expect(cells.slice(0, 6)).toEqual(["#PID<0.1.0>", "4", "1 ms", "2 ms", "2.1 ms", "1"]);
    expect(el.textContent).toContain("3 more processes");
  });
});

async function open() {
  const handlers = {};
  const pushed = [];
  const root = document.createElement("div");
  document.body.replaceChildren(root);
  const ctx = { root, importCSS: async () => {}, handleEvent: (e, f) => (handlers[e] = f), pushEvent: (e, p) => pushed.push([e, p]) };
  const call = { id: 1, kind: "call", mfa: "M.f/1", call: "M.f(1)", pid: "#PID<0.1.0>", node: "a@h", depth: 0, time: 1 };
  const ret = { id: 2, kind: "return", mfa: "M.f/1", result: ":ok", call_id: 1, duration: 1_000_000, pid: "#PID<0.1.0>", node: "a@h", depth: 0, time: 2 };
  await init(ctx, { patterns: ["M.f/1"], status: "running", counters: { events: 2 }, events: [call, ret] });
  return { root, pushed, emit: (e, p) => handlers[e](p), $: (s) => root.querySelector(s) };
}

describe("the trace widget's Stats and Flame tabs", () => {
  it("the Stats tab shows the pushed p50 and p99 and opens a function's processes", async () => {
    const w = await open();
    w.$('[data-tab="stats"]').click();
    w.emit("latency", { rows: [{ mfa: "M.f/1", latency: dist(), processes: [{ pid: "#PID<0.1.0>", latency: dist() }], processes_omitted: 0 }], rows_omitted: 0 });
    const heads = [...w.root.querySelectorAll(".kt-stats th")].map((th) => th.textContent);
    expect(heads).toEqual(["Function", "Calls", "Total", "Mean", "p50", "p99", "Distribution", "Max", "Exceptions", "Slowest"]);
    const cells = [...w.root.querySelectorAll(".kt-stats tbody tr td")].map((td) => td.textContent);
    expect(cells.slice(4, 6)).toEqual(["1 ms", "2 ms"]);
    w.$(".kt-stats tbody tr").click();
    expect(w.$('[data-testid="latency-drill"]').textContent).toContain("#PID<0.1.0>");
  });

  it("the Flame tab asks for its data when it shows, then at most once a second while events come", async () => {
    vi.useFakeTimers();
    try {
      const w = await open();
      const asked = () => w.pushed.filter(([e]) => e === "get_flame");
      expect(asked()).toEqual([]); // not while another tab shows
      w.$('[data-tab="flame"]').click();
      expect(asked()).toEqual([["get_flame", { process: null }]]);
      for (let i = 0; i < 5; i++) w.emit("events", { events: [{ id: 10 + i, kind: "call", mfa: "M.g/0", pid: "#PID<0.1.0>", depth: 0 }], counters: { events: 3 + i } });
      expect(asked().length).toBe(1);
      vi.advanceTimersByTime(1000);
      expect(asked().length).toBe(2);
      vi.advanceTimersByTime(5000);
      expect(asked().length).toBe(2); // nothing new came
      w.emit("flame", { frames: ["M.f/1"], nodes: [-1, -1, 10, 0, 0, 0, 10, 10], no_return: [], processes: [{ pid: "#PID<0.1.0>", name: ":worker", total: 10 }], process: null, omitted: 0 });
      const select = w.$(".kt-flame-process");
      expect([...select.options].map((o) => o.textContent)).toEqual(["All processes", ":worker #PID<0.1.0> · 10 ns"]);
      select.value = "#PID<0.1.0>";
      select.dispatchEvent(new Event("change"));
      expect(asked().at(-1)).toEqual(["get_flame", { process: "#PID<0.1.0>" }]);
    } finally {
      vi.useRealTimers();
    }
  });
});
