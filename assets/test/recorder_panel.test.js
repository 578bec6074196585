// @vitest-environment jsdom
// A recorder's panel in the trace widget (issue 37.5): the ring's fullness, overwritten
// events, triggers fired, the snapshots listed; a snapshot opened in the usual tabs (its
// own widget, on the server's "view" events) and back, and downloaded as the server's
// trace file bytes.
import { describe, it, expect, vi } from "vitest";
import { RecorderPanel, ringText, triggersText, formatBytes } from "../src/recorder_panel.js";
import { ViewTransport } from "../src/view_transport.js";
import { decodeBase64 } from "../src/export.js";
import { init } from "../src/main.js";

const panel = (over = {}) => ({
  kept: 6,
  capacity: 6,
  kept_bytes: 1200,
  capacity_bytes: 64 * 1024 * 1024,
  overwritten: 14,
  triggers: [
    { trigger: "exception", text: "exception", fired: 1 },
    { trigger: "slower_than", text: "slower than 50 ms", fired: 0 },
  ],
  recording_after: false,
  snapshots_taken: 1,
  snapshots_dropped: 0,
  snapshots: [{ id: 7, trigger: "exception", taken_at: 1_700_000_000_000_000, trigger_time: 1, pid: "#PID<0.1.0>", events: 2, bytes: 300 }],
  ...over,
});

const row = (id, kind, extra = {}) => ({ id, kind, mfa: "M.f/1", pid: "#PID<0.1.0>", time: 1_700_000_000_000_000, depth: 0, ...extra });

describe("RecorderPanel", () => {
  it("says how full the ring is, what was overwritten, and the triggers fired", () => {
    expect(ringText(panel())).toBe("ring: 6 of 6 events (100%) · 1.2 KB of 64.0 MB · 14 overwritten");
    expect(triggersText(panel())).toBe("triggers: exception fired 1 · slower than 50 ms fired 0");
    expect(triggersText(panel({ triggers: [] }))).toMatch(/no trigger armed/);
    expect(formatBytes(10)).toBe("10 B");
  });

  it("is hidden until a recorder's panel comes, then lists its snapshots", () => {
    const parent = document.createElement("div");
    const p = new RecorderPanel(parent, { onOpen: () => {}, onBack: () => {}, onDownload: () => {} });
    expect(p.el.hidden).toBe(true);
    p.render(panel());
    expect(p.el.hidden).toBe(false);
    expect(parent.querySelector("[data-testid=recorder-ring]").textContent).toMatch(/14 overwritten/);
    const items = parent.querySelectorAll(".kt-recorder-item");
    expect(items.length).toBe(1);
    expect(items[0].textContent).toMatch(/exception in #PID<0\.1\.0> · 2 events/);
  });

  it("asks for a snapshot on a click, says which one shows, and goes back", () => {
    const opened = [];
    let backs = 0;
    const p = new RecorderPanel(document.createElement("div"), { onOpen: (id) => opened.push(id), onBack: () => backs++, onDownload: () => {} });
    p.render(panel());
    expect(p.bar.hidden).toBe(true);
    p.el.querySelector("[data-action=open-snapshot]").click();
    expect(opened).toEqual([7]);
    expect(p.openId).toBe(7);
    expect(p.bar.textContent).toMatch(/Opening the snapshot of \d\d:\d\d:\d\d/);
    expect(p.el.querySelector(".kt-recorder-item").getAttribute("aria-current")).toBe("true");
    p.shown(7);
    expect(p.bar.textContent).toMatch(/Showing the snapshot of [\d:.]+ \(exception in #PID<0\.1\.0>, 2 events\) in the tabs below/);
    // the list drawn again keeps the mark
    p.render(panel());
    expect(p.el.querySelector(".kt-recorder-item-open")).not.toBe(null);
    p.el.querySelector("[data-action=back-to-live]").click();
    expect(backs).toBe(1);
    p.closed();
    expect(p.openId).toBe(null);
    expect(p.bar.hidden).toBe(true);
    expect(p.el.querySelector(".kt-recorder-item-open")).toBe(null);
  });

  it("goes back to the live recorder when the snapshot shown leaves the list", () => {
    let backs = 0;
    const p = new RecorderPanel(document.createElement("div"), { onOpen: () => {}, onBack: () => backs++, onDownload: () => {} });
    p.render(panel());
    p.render(panel({ snapshots: [] }));
    expect(backs).toBe(0);
    p.render(panel());
    p.open(7);
    p.render(panel({ snapshots: [] }));
    expect(backs).toBe(1);
  });

  it("shows the server's error", () => {
    const p = new RecorderPanel(document.createElement("div"), { onOpen: () => {}, onBack: () => {}, onDownload: () => {} });
    p.render(panel());
    p.showError("this snapshot is no longer kept");
    expect(p.error.hidden).toBe(false);
    expect(p.error.textContent).toBe("this snapshot is no longer kept");
    p.open(7);
    expect(p.error.hidden).toBe(true);
  });

  it("downloads a snapshot as the trace file's bytes the server sent", async () => {
    const asked = [];
    const p = new RecorderPanel(document.createElement("div"), { onOpen: () => {}, onBack: () => {}, onDownload: (id) => asked.push(id) });
    p.render(panel());
    p.el.querySelector("[data-action=download-snapshot]").click();
    expect(asked).toEqual([7]);

    const blobs = [];
    URL.createObjectURL = vi.fn((blob) => (blobs.push(blob), "blob:x"));
    URL.revokeObjectURL = vi.fn();
    const names = [];
    const click = vi.spyOn(HTMLAnchorElement.prototype, "click").mockImplementation(function () {
      names.push(this.getAttribute("download"));
    });
    const bytes = new Uint8Array([1, 0, 0, 0, 3, 255, 128, 75]);
    p.download({ id: 7, name: "snapshot-7.ktrace", data: btoa(String.fromCharCode(...bytes)) });
    expect(names).toEqual(["snapshot-7.ktrace"]);
    expect(new Uint8Array(await blobs[0].arrayBuffer())).toEqual(bytes);
    expect(decodeBase64("AQID")).toEqual(new Uint8Array([1, 2, 3]));
    click.mockRestore();
  });
});

describe("ViewTransport", () => {
  it("carries a snapshot view's events as the server's 'view' events, both ways", () => {
    const pushed = [];
    const outer = { push: (e, p) => pushed.push([e, p]) };
    const root = document.createElement("div");
    const t = new ViewTransport(outer, 7, root);
    expect(t.root).toBe(root);
    const got = [];
    t.on("term", (p) => got.push(p));
    t.push("get_term", { id: 3 });
    expect(pushed).toEqual([["view", { id: 7, event: "get_term", payload: { id: 3 } }]]);
    expect(t.receive({ id: 7, event: "term", payload: { id: 3 } })).toBe(true);
    // another snapshot's, or an event it has no handler for
    expect(t.receive({ id: 8, event: "term", payload: { id: 4 } })).toBe(false);
    expect(t.receive({ id: 7, event: "flame", payload: {} })).toBe(true);
    expect(got).toEqual([{ id: 3 }]);
  });
});

const counters = { events: 2, dropped: {}, fallback: [] };
const connect = (over = {}) => ({ patterns: [], trace: { calls: true, messages: null, message_pattern: null, processes: null }, status: "running", counters, events: [], max_entries: 100, sequence_rows: 100, ...over });

async function widget() {
  const handlers = {};
  const pushed = [];
  const root = document.createElement("div");
  document.body.appendChild(root);
  const ctx = { root, handleEvent: (e, f) => (handlers[e] = f), pushEvent: (e, p) => pushed.push([e, p]), importCSS: () => Promise.resolve() };
  await init(ctx, connect({ events: [row(1, "call", { call: "Live.f(1)" })] }));
  return { handlers, pushed, root, live: root.__kinoTrace };
}

const snapshotRows = () => [row(11, "call", { call: "Snap.fail(1)" }), row(12, "exception", { call_id: 11, exception: "** (ArgumentError) no stock" })];

describe("the widget with a recorder", () => {
  it("shows the panel a 'recorder' push brings, and asks for a snapshot and its file through pushEvent", async () => {
    const { handlers, pushed, root } = await widget();
    const el = root.querySelector("[data-testid=recorder]");
    expect(el.hidden).toBe(true);
    expect(pushed).toEqual([]);
    handlers.recorder(panel());
    expect(el.hidden).toBe(false);
    root.querySelector("[data-action=open-snapshot]").click();
    root.querySelector("[data-action=download-snapshot]").click();
    expect(pushed).toEqual([
      ["open_snapshot", { id: 7 }],
      ["get_snapshot_file", { id: 7 }],
    ]);
    root.remove();
  });

  it("shows a snapshot clicked in the usual tabs, its requests as 'view' events, and goes back", async () => {
    const { handlers, pushed, root, live } = await widget();
    handlers.recorder(panel());
    root.querySelector("[data-action=open-snapshot]").click();
    // an answer to an earlier click is ignored
    handlers.snapshot({ id: 6, view: connect({ events: snapshotRows() }) });
    expect(root.querySelector("[data-testid=snapshot-view]")).toBe(null);

    handlers.snapshot({ id: 7, view: connect({ status: "stopped", events: snapshotRows() }) });
    const view = root.querySelector("[data-testid=snapshot-view]");
    expect(view.dataset.snapshotId).toBe("7");
    // in place of the live header and tabs, the panel above it
    expect(live.live.hidden).toBe(true);
    expect(live.header.el.hidden).toBe(true);
    expect(root.querySelector("[data-testid=recorder]").hidden).toBe(false);
    expect(root.querySelector("[data-testid=recorder-bar]").textContent).toMatch(/Showing the snapshot of /);
    expect([...view.querySelectorAll("[data-tab]")].map((b) => b.dataset.tab)).toEqual(["log", "sequence", "stats", "calls", "flame"]);
    expect(view.querySelector(".kt-vlist").textContent).toMatch(/Snap\.fail\(1\)/);
    expect(view.querySelector(".kt-vlist").textContent).not.toMatch(/Live\.f/);
    const shown = live.snapshotView.widget;
    expect(shown.state.status).toBe("stopped");

    // its requests go as "view" events, its answers come so
    pushed.length = 0;
    view.querySelector(".kt-vlist .kt-row").click();
    expect(pushed).toContainEqual(["view", { id: 7, event: "get_term", payload: { id: 11 } }]);
    handlers.view({ id: 7, event: "term", payload: { id: 11, kind: "call", mfa: "Snap.fail/1", args: ["1"], cut: false } });
    expect(shown.terms.has(11)).toBe(true);
    view.querySelector('[data-tab="flame"]').click();
    expect(pushed).toContainEqual(["view", { id: 7, event: "get_flame", payload: { process: null } }]);
    // another snapshot's view event is not this one's
    handlers.view({ id: 8, event: "term", payload: { id: 12, kind: "exception", mfa: "M.f/1", cut: false } });
    expect(shown.terms.has(12)).toBe(false);
    // the live trace's events still go to the live log
    handlers.events({ events: [row(2, "call", { call: "Live.g(2)" })], counters });
    expect(live.model.size).toBe(2);
    expect(shown.model.size).toBe(1); // (a call and its exception: one row)

    // back to the live recorder
    root.querySelector("[data-action=back-to-live]").click();
    expect(root.querySelector("[data-testid=snapshot-view]")).toBe(null);
    expect(live.snapshotView).toBe(null);
    expect(live.live.hidden).toBe(false);
    expect(live.header.el.hidden).toBe(false);
    expect(root.querySelector("[data-testid=recorder-bar]").hidden).toBe(true);
    expect(root.querySelector(".kt-vlist").textContent).toMatch(/Live\.g\(2\)/);
    // a late answer for it is ignored
    handlers.view({ id: 7, event: "term", payload: { id: 12, kind: "exception", mfa: "M.f/1", cut: false } });
    root.remove();
  });

  it("goes back to the live recorder on the server's error, and when the snapshot leaves the list", async () => {
    const { handlers, root, live } = await widget();
    handlers.recorder(panel());
    root.querySelector("[data-action=open-snapshot]").click();
    handlers.snapshot({ id: 7, error: "this snapshot is no longer kept (stopped, or pushed out by newer ones)" });
    expect(live.live.hidden).toBe(false);
    expect(root.querySelector(".kt-recorder-error").textContent).toMatch(/no longer kept/);

    root.querySelector("[data-action=open-snapshot]").click();
    handlers.snapshot({ id: 7, view: connect({ events: snapshotRows() }) });
    expect(live.live.hidden).toBe(true);
    handlers.recorder(panel({ snapshots: [] }));
    expect(root.querySelector("[data-testid=snapshot-view]")).toBe(null);
    expect(live.live.hidden).toBe(false);
    root.remove();
  });
});
