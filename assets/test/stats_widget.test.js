// @vitest-environment jsdom
import { describe, it, expect } from "vitest";
import { StatsWidget, statsColumns, processRows, formatMicros, formatWords, formatShare } from "../src/stats_widget.js";
import { StatsTable, STATS_COLUMNS, barFraction } from "../src/stats_table.js";
import { Transport } from "../src/transport.js";

// A payload as KinoTrace.Widget.StatsPayload.snapshot/2 makes it.
const proc = (pid, calls, time_us, time_share, memory_words, memory_share, name = null) => ({ pid, name, calls, time_us, time_share, memory_words, memory_share });
const row = (name, calls, time_us, time_share, memory_words, processes, extra = {}) => ({
  key: name,
  name,
  calls,
  time_us,
  per_call_us: calls ? time_us / calls : null,
  time_share,
  memory_words,
  per_call_words: calls ? memory_words / calls : null,
  memory_share: 0,
  processes,
  processes_omitted: null,
  ...extra,
});
const snapshot = (rows, fields = {}) => ({
  id: 1,
  patterns: ["MyApp.Repo", ":ets.lookup/2"],
  taken_at: 1_700_000_000_000_000,
  elapsed_us: 3_200_000,
  measured: { time: true, memory: true },
  totals: { calls: rows.reduce((n, r) => n + r.calls, 0), functions: rows.length, time_us: rows.reduce((n, r) => n + r.time_us, 0), memory_words: 1000 },
  rows,
  rows_omitted: 0,
  ...fields,
});
const rows = [
  row("MyApp.Repo.get/2", 1000, 40_000, 0.8, 900, [proc("#PID<0.1.0>", 600, 30_000, 0.75, 500, 0.55), proc("#PID<0.2.0>", 400, 10_000, 0.25, 400, 0.45, ":repo")]),
  row(":ets.lookup/2", 3000, 10_000, 0.2, 100, [proc("#PID<0.1.0>", 3000, 10_000, 1, 100, 1)]),
];

function fakeCtx() {
  const handlers = {};
  const pushed = [];
  return {
    root: document.createElement("div"),
    handleEvent: (e, f) => (handlers[e] = f),
    pushEvent: (e, p) => pushed.push([e, p]),
    emit: (e, p) => handlers[e](p),
    pushed,
  };
}

const names = (root) => [...root.querySelectorAll("tbody tr[data-key] td:first-child")].map((td) => td.textContent);

describe("stats widget", () => {
  it("formats µs, words and shares", () => {
    expect(formatMicros(0)).toBe("0 µs");
    expect(formatMicros(1500)).toBe("1.5 ms");
    expect(formatWords(12_500)).toBe("12.5k w");
    expect(formatShare(0.8)).toBe("80%");
    expect(formatShare(0.1234)).toBe("12.3%");
    expect(formatShare(0.0001)).toBe("<0.1%");
  });

  it("columns follow what is measured", () => {
    expect(statsColumns({ time: true, memory: true }).map((c) => c.key)).toEqual(["name", "calls", "time_us", "time_share", "per_call_us", "memory_words", "per_call_words"]);
    expect(statsColumns({ time: false, memory: true }).map((c) => c.key)).toEqual(["name", "calls", "memory_words", "per_call_words"]);
    expect(statsColumns({ time: false, memory: false }).map((c) => c.key)).toEqual(["name", "calls"]);
  });

  it("renders the rows by time, with share bars, and sorts on header clicks", () => {
    const ctx = fakeCtx();
    new StatsWidget(new Transport(ctx), { status: "running", interval: 1000, snapshot: snapshot(rows) });
    expect(names(ctx.root)).toEqual(["MyApp.Repo.get/2", ":ets.lookup/2"]);
    const bar = ctx.root.querySelector("tbody tr[data-key] .kt-bar");
    expect(bar.style.width).toBe("80%");
    ctx.root.querySelector('th[data-key="calls"]').click();
    expect(names(ctx.root)).toEqual([":ets.lookup/2", "MyApp.Repo.get/2"]);
    ctx.root.querySelector('th[data-key="name"]').click();
    expect(names(ctx.root)).toEqual([":ets.lookup/2", "MyApp.Repo.get/2"]);
    expect(ctx.root.querySelector('th[data-key="name"]').dataset.dir).toBe("asc");
    expect(ctx.root.querySelector('[data-counter="calls"]').textContent).toBe("4k calls");
    expect(ctx.root.querySelector(".kt-stats-patterns").textContent).toContain(":ets.lookup/2");
  });

  it("latency: true: each process of the drill-down has its p50, p99, max and histogram; the rest summed", () => {
    const ctx = fakeCtx();
    const dist = (p50, count) => ({ count, unknown: 0, min: p50, p50, p90: p50, p99: 2 * p50, p999: 2 * p50, max: 3 * p50, histogram: [[p50, count]], exceptions: { count: 0, p50: null, p99: null, max: null } });
    const get = { ...rows[0], latency: dist(100, 1000) };
    get.processes = [{ ...get.processes[0], latency: dist(1000, 600) }, { ...get.processes[1], latency: null }];
    get.processes_omitted = { count: 7, calls: 70, time_us: 500, memory_words: 5 };
    new StatsWidget(new Transport(ctx), { status: "running", snapshot: snapshot([get], { measured: { time: true, memory: true, latency: true } }) });
    ctx.root.querySelector('tr[data-key="MyApp.Repo.get/2"] td').click();
    const drill = ctx.root.querySelector('[data-testid="drill"]');
    const heads = [...drill.querySelectorAll("th")].map((th) => th.textContent);
    expect(heads.slice(-4)).toEqual(["p50", "p99", "Max", "Distribution"]);
    const cells = (tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent);
    const [one, two, rest] = drill.querySelectorAll(":scope > tbody > tr");
    expect(cells(one).slice(-4, -1)).toEqual(["1 ms", "2 ms", "3 ms"]);
    expect(one.querySelectorAll('[data-testid="process-histogram"] rect').length).toBe(1);
    // a process none of whose calls returned yet, and the processes not shown
    expect(cells(two).slice(-4, -1)).toEqual(["–", "–", "–"]);
    expect(cells(rest)[0]).toBe("7 more processes");
    expect(cells(rest).slice(-4, -1)).toEqual(["–", "–", "–"]);
  });

  it("a row click opens its per-process drill-down, which stays open across updates", () => {
    const ctx = fakeCtx();
    new StatsWidget(new Transport(ctx), { status: "running", snapshot: snapshot(rows) });
    ctx.root.querySelector('tr[data-key="MyApp.Repo.get/2"] td').click();
    let drill = ctx.root.querySelector('[data-testid="drill"]');
    expect([...drill.querySelectorAll(":scope > tbody > tr")].map((tr) => tr.dataset.pid)).toEqual(["#PID<0.1.0>", "#PID<0.2.0>"]);
    expect(drill.textContent).toContain(":repo");
    expect(drill.querySelector(".kt-share-fill").style.width).toBe("75%");

    const more = rows.map((r) => ({ ...r, calls: r.calls + 1 }));
    ctx.emit("snapshot", { status: "running", snapshot: snapshot(more) });
    drill = ctx.root.querySelector('[data-testid="drill"]');
    expect(drill).not.toBe(null);
    expect(ctx.root.querySelector('tr[data-key="MyApp.Repo.get/2"]').getAttribute("aria-expanded")).toBe("true");
    ctx.root.querySelector('tr[data-key="MyApp.Repo.get/2"] td').click();
    expect(ctx.root.querySelector('[data-testid="drill"]')).toBe(null);
  });

  it("processes left out are summed in one line", () => {
    const r = row("M.f/0", 10, 100, 1, 10, [proc("#PID<0.1.0>", 4, 40, 0.4, 4, 0.4)], { processes_omitted: { count: 3, calls: 6, time_us: 60, memory_words: 6 } });
    const list = processRows(r);
    expect(list.map((p) => [p.label, p.calls, p.time_share])).toEqual([
      ["#PID<0.1.0>", 4, 0.4],
      ["3 more processes", 6, 0.6],
    ]);
  });

  it("reset and stop push events; a stopped session disables them; ticks move the clock", () => {
    const ctx = fakeCtx();
    new StatsWidget(new Transport(ctx), { status: "running", snapshot: snapshot(rows) });
    ctx.root.querySelector('[data-action="reset"]').click();
    ctx.root.querySelector('[data-action="stop"]').click();
    expect(ctx.pushed.map(([e]) => e)).toEqual(["reset", "stop"]);
    ctx.emit("tick", { status: "running", elapsed_us: 75_000_000, taken_at: 1 });
    expect(ctx.root.querySelector('[data-counter="elapsed"]').textContent).toBe("in 1 min 15 s");
    ctx.emit("status", { status: "stopped", snapshot: snapshot(rows) });
    expect(ctx.root.querySelector(".kt-status").textContent).toBe("Stopped");
    expect(ctx.root.querySelector('[data-action="reset"]').disabled).toBe(true);
  });

  it("without time measured, sorts by calls and shows no time columns", () => {
    const ctx = fakeCtx();
    const r = rows.map((x) => ({ ...x, time_us: null, time_share: null, per_call_us: null }));
    new StatsWidget(new Transport(ctx), { status: "running", snapshot: snapshot(r, { measured: { time: false, memory: true } }) });
    expect(ctx.root.querySelector('th[data-key="time_us"]')).toBe(null);
    expect(ctx.root.querySelector("th.kt-sorted").dataset.key).toBe("calls");
    expect(names(ctx.root)).toEqual([":ets.lookup/2", "MyApp.Repo.get/2"]);
  });
});

describe("shared table renderer", () => {
  it("bars: relative to the column's largest value, or a given share", () => {
    expect(barFraction({ key: "total", bar: true }, { total: 50 }, 200)).toBe(0.25);
    expect(barFraction({ key: "t", bar: (r) => r.share }, { share: 0.4 }, 0)).toBe(0.4);
    expect(barFraction({ key: "t" }, { t: 1 }, 1)).toBe(null);
  });

  it("the calls widget's columns need no drill-down", () => {
    const parent = document.createElement("div");
    const t = new StatsTable(parent, { columns: STATS_COLUMNS });
    t.render([{ mfa: "A.a/0", count: 1, total: 5, mean: 5, max: 5, exceptions: 0 }]);
    parent.querySelector("tbody td").click();
    expect(parent.querySelectorAll("tr.kt-drill").length).toBe(0);
  });
});
