// A recorder's panel (issue 37.5), above the tabs of a trace widget whose trace is a
// recorder (Kino.Trace.record/2): how full its ring is (events kept of its capacity,
// bytes, how many were overwritten), its triggers and how often each fired, and its
// frozen snapshots, newest first (time, trigger, events). A snapshot opens under the
// list as its call trees and rows ("open_snapshot", the reply "snapshot"), and downloads
// as the trace file Kino.Trace.save/2 writes ("get_snapshot_file", the reply
// "snapshot_file", base64). The server sends the panel ("recorder",
// KinoTrace.Widget.RecorderPayload) when it changes; the widget asks for it once at start.

import { h, button } from "./dom.js";
import { formatCount, formatTime, entryLine } from "./format.js";
import { renderList } from "./call_tree.js";
import { slowCallTree } from "./slow_calls_view.js";
import { downloadBytes } from "./export.js";

/** Bytes with a unit. */
export function formatBytes(n) {
  if (n == null) return "";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MB`;
}

/** The ring's line: "kept 6 of 6 events (100%) · 1.2 KB of 64.0 MB · 14 overwritten". */
export function ringText(p) {
  const share = p.capacity ? Math.min(100, Math.round((100 * p.kept) / p.capacity)) : 0;
  return `ring: ${formatCount(p.kept)} of ${formatCount(p.capacity)} events (${share}%) · ${formatBytes(p.kept_bytes)} of ${formatBytes(p.capacity_bytes)} · ${formatCount(p.overwritten)} overwritten`;
}

/** The triggers' line: "exception fired 1 · slower than 50 ms fired 0", or none armed. */
export function triggersText(p) {
  if (!p.triggers.length) return "no trigger armed: snapshots with Kino.Trace.snapshot/1";
  const each = p.triggers.map((t) => `${t.text} fired ${formatCount(t.fired)}`).join(" · ");
  return `triggers: ${each}${p.recording_after ? " · recording after a trigger…" : ""}`;
}

export class RecorderPanel {
  /**
   * @param {HTMLElement | null} parent (the caller places `el` itself when null)
   * @param {object} opts onOpen(id) asks for a snapshot's events, onDownload(id) for its file
   */
  constructor(parent, { onOpen, onDownload }) {
    this.onOpen = onOpen;
    this.onDownload = onDownload;
    this.panel = null;
    this.openId = null;
    this.el = h("div", { class: "kt-recorder", "data-testid": "recorder", hidden: "" });
    this.summary = h("div", { class: "kt-recorder-figures" });
    this.list = h("ul", { class: "kt-recorder-snapshots" });
    this.view = h("div", { class: "kt-recorder-snapshot", "data-testid": "recorder-snapshot", hidden: "" });
    this.error = h("div", { class: "kt-recorder-error kt-exception", hidden: "" });
    this.el.append(this.summary, this.list, this.error, this.view);
    if (parent) parent.appendChild(this.el);
  }

  /** Draws a "recorder" payload. */
  render(p) {
    this.panel = p;
    this.el.hidden = false;
    const dropped = p.snapshots_dropped ? ` · ${formatCount(p.snapshots_dropped)} older ended` : "";
    this.summary.replaceChildren(
      h("div", { class: "kt-recorder-ring", "data-testid": "recorder-ring", text: ringText(p) }),
      h("div", { class: "kt-recorder-triggers", "data-testid": "recorder-triggers", text: triggersText(p) }),
      h("div", { class: "kt-muted", text: `${formatCount(p.snapshots.length)} snapshots kept · ${formatCount(p.snapshots_taken)} taken${dropped}` })
    );
    this.list.replaceChildren(...p.snapshots.map((s) => this.item(s)));
    // a snapshot shown that is no longer kept
    if (this.openId != null && !p.snapshots.some((s) => s.id === this.openId)) this.closeSnapshot();
  }

  item(s) {
    const who = s.pid ? ` in ${s.pid}` : "";
    return h(
      "li",
      { class: "kt-recorder-item", "data-snapshot-id": String(s.id) },
      h("button", {
        class: "kt-link kt-recorder-open",
        type: "button",
        "data-action": "open-snapshot",
        title: "Show this snapshot's events",
        text: `${formatTime(s.taken_at)} · ${s.trigger}${who} · ${formatCount(s.events)} events (${formatBytes(s.bytes)})`,
        onclick: () => {
          this.openId = s.id;
          this.view.hidden = false;
          this.view.replaceChildren(h("div", { class: "kt-muted", text: "loading…" }));
          this.onOpen(s.id);
        },
      }),
      button("Download", "download-snapshot", () => this.onDownload(s.id), "kt-button kt-recorder-download")
    );
  }

  /** Draws a "snapshot" reply: the snapshot's call trees and rows, or why not. */
  showSnapshot(reply) {
    if (reply.id !== this.openId && reply.id != null) return;
    if (reply.error != null) return this.showError(reply.error);
    const events = reply.events || [];
    this.view.hidden = false;
    this.view.replaceChildren(
      h("div", { class: "kt-drill-title" }, h("span", { text: `Snapshot ${reply.id}: ${formatCount(events.length)} events${reply.omitted ? ` (the newest; ${formatCount(reply.omitted)} older in its file)` : ""}` }), button("Close", "close-snapshot", () => this.closeSnapshot(), "kt-button")),
      renderList(slowCallTree(events)),
      h("pre", { class: "kt-mono kt-recorder-rows", "data-testid": "recorder-rows", text: events.map(entryLine).join("\n") })
    );
  }

  /** Offers a "snapshot_file" reply as a download, or shows why not. */
  download(reply) {
    if (reply.error != null) return this.showError(reply.error);
    this.error.hidden = true;
    downloadBytes(reply.data, reply.name);
  }

  showError(message) {
    this.error.hidden = false;
    this.error.textContent = message;
  }

  closeSnapshot() {
    this.openId = null;
    this.view.hidden = true;
    this.view.replaceChildren();
  }
}
