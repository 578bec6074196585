// @vitest-environment jsdom
// A recorder's panel in the trace widget (issue 37.5): the ring's fullness, overwritten
// events, triggers fired, the snapshots listed; a snapshot opened and downloaded as the
// server's trace file bytes.
import { describe, it, expect, vi } from "vitest";
import { RecorderPanel, ringText, triggersText, formatBytes } from "../src/recorder_panel.js";
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
    const p = new RecorderPanel(parent, { onOpen: () => {}, onDownload: () => {} });
    expect(p.el.hidden).toBe(true);
    p.render(panel());
    expect(p.el.hidden).toBe(false);
    expect(parent.querySelector("[data-testid=recorder-ring]").textContent).toMatch(/14 overwritten/);
    const items = parent.querySelectorAll(".kt-recorder-item");
    expect(items.length).toBe(1);
    expect(items[0].textContent).toMatch(/exception in #PID<0\.1\.0> · 2 events/);
  });

  it("opens a snapshot: asks for it, then shows its rows; closes it when it is no longer kept", () => {
    const opened = [];
    const p = new RecorderPanel(document.createElement("div"), { onOpen: (id) => opened.push(id), onDownload: () => {} });
    p.render(panel());
    p.el.querySelector("[data-action=open-snapshot]").click();
    expect(opened).toEqual([7]);
    expect(p.view.textContent).toMatch(/loading/);
    p.showSnapshot({ id: 7, events: [row(1, "call", { call: "M.f(1)" }), row(2, "return", { call_id: 1, result: ":ok" })] });
    expect(p.view.textContent).toMatch(/Snapshot 7: 2 events/);
    expect(p.view.textContent).not.toMatch(/older/);
    expect(p.view.querySelector("[data-testid=recorder-rows]").textContent).toMatch(/M\.f\(1\)/);
    // a reply for another snapshot than the one open is ignored
    p.showSnapshot({ id: 8, events: [] });
    expect(p.view.textContent).toMatch(/Snapshot 7/);
    // gone from the list: closed
    p.render(panel({ snapshots: [] }));
    expect(p.view.hidden).toBe(true);
  });

  it("shows the server's error for a snapshot no longer kept", () => {
    const p = new RecorderPanel(document.createElement("div"), { onOpen: () => {}, onDownload: () => {} });
    p.render(panel());
    p.el.querySelector("[data-action=open-snapshot]").click();
    p.showSnapshot({ id: 7, events: [row(9, "call")], omitted: 4000 });
    expect(p.view.textContent).toMatch(/Snapshot 7: 1 events \(the newest; 4k older in its file\)/);
    p.showSnapshot({ id: 7, error: "this snapshot is no longer kept" });
    expect(p.error.hidden).toBe(false);
    expect(p.error.textContent).toBe("this snapshot is no longer kept");
  });

  it("downloads a snapshot as the trace file's bytes the server sent", async () => {
    const asked = [];
    const p = new RecorderPanel(document.createElement("div"), { onOpen: () => {}, onDownload: (id) => asked.push(id) });
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

describe("the widget with a recorder", () => {
  it("shows the panel a 'recorder' push brings, and asks for a snapshot through pushEvent", async () => {
    const handlers = {};
    const pushed = [];
    const root = document.createElement("div");
    document.body.appendChild(root);
    const ctx = { root, handleEvent: (e, f) => (handlers[e] = f), pushEvent: (e, p) => pushed.push([e, p]), importCSS: () => Promise.resolve() };
    const counters = { events: 0, dropped: {}, fallback: [] };
    await init(ctx, { patterns: [], trace: { calls: true, messages: null, message_pattern: null, processes: null }, status: "running", counters, events: [], max_entries: 100, sequence_rows: 100 });
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
    handlers.snapshot({ id: 7, events: [row(1, "call", { call: "M.f(1)" })] });
    expect(root.querySelector("[data-testid=recorder-rows]").textContent).toMatch(/M\.f\(1\)/);
    root.remove();
  });
});
