// A recorder's panel (issue 37.5), above the tabs of a trace widget whose trace is a
// recorder (Kino.Trace.record/2): how full its ring is (events kept of its capacity,
// bytes, how many were overwritten), its triggers and how often each fired, and its
// frozen snapshots, newest first (time, trigger, events). A click on a snapshot asks for
// it ("open_snapshot"); the widget (app.js) shows the reply, the snapshot's own widget
// (KinoTrace.Widget.Views), in the usual tabs in place of the live ones, until "Back to
// the live recorder" or until the snapshot leaves the list. Download saves its trace
// file, as Kino.Trace.save/2 writes it ("get_snapshot_file", the reply "snapshot_file",
// base64). The server sends the panel ("recorder", KinoTrace.Widget.RecorderPayload)
// when it changes; the widget asks for it once at start.

import { h, button } from "./dom.js";
import { formatCount, formatTime } from "./format.js";
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
   * @param {object} opts onOpen(id) asks for a snapshot (the widget shows the reply),
   *   onBack() goes back to the live recorder, onDownload(id) asks for a snapshot's file
   */
  constructor(parent, { onOpen, onBack, onDownload }) {
    this.onOpen = onOpen;
    this.onBack = onBack;
    this.onDownload = onDownload;
    this.panel = null;
    this.openId = null; // the snapshot asked for or shown in the tabs
    this.shownId = null; // the snapshot shown in the tabs
    this.el = h("div", { class: "kt-recorder", "data-testid": "recorder", hidden: "" });
    this.summary = h("div", { class: "kt-recorder-figures" });
    this.list = h("ul", { class: "kt-recorder-snapshots" });
    this.bar = h("div", { class: "kt-recorder-bar", "data-testid": "recorder-bar", hidden: "" });
    this.error = h("div", { class: "kt-recorder-error kt-exception", hidden: "" });
    this.el.append(this.summary, this.list, this.bar, this.error);
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
    // a snapshot asked for or shown that is no longer kept: back to the live recorder
    if (this.openId != null && !p.snapshots.some((s) => s.id === this.openId)) this.onBack();
  }

  /** The snapshot `id` of the list, or undefined. */
  snapshot(id) {
    return this.panel ? this.panel.snapshots.find((s) => s.id === id) : undefined;
  }

  item(s) {
    const who = s.pid ? ` in ${s.pid}` : "";
    const open = s.id === this.openId;
    return h(
      "li",
      { class: `kt-recorder-item${open ? " kt-recorder-item-open" : ""}`, "data-snapshot-id": String(s.id), "aria-current": open ? "true" : null },
      h("button", {
        class: "kt-link kt-recorder-open",
        type: "button",
        "data-action": "open-snapshot",
        title: "Show this snapshot in the tabs (Log, Sequence, Stats, Calls, Flame)",
        text: `${formatTime(s.taken_at)} · ${s.trigger}${who} · ${formatCount(s.events)} events (${formatBytes(s.bytes)})`,
        onclick: () => this.open(s.id),
      }),
      button("Download", "download-snapshot", () => this.onDownload(s.id), "kt-button kt-recorder-download")
    );
  }

  /** Asks for snapshot `id`; the bar says so until the widget shows it (`shown`). */
  open(id) {
    this.openId = id;
    this.shownId = null;
    this.error.hidden = true;
    this.drawBar(`Opening ${this.label(id)}…`);
    this.mark();
    this.onOpen(id);
  }

  /** The widget shows snapshot `id` in the tabs. */
  shown(id) {
    this.openId = this.shownId = id;
    const s = this.snapshot(id);
    const what = s ? ` (${s.trigger}${s.pid ? ` in ${s.pid}` : ""}, ${formatCount(s.events)} events)` : "";
    this.drawBar(`Showing ${this.label(id)}${what} in the tabs below`);
    this.mark();
  }

  /** Back to the live recorder: no snapshot asked for or shown. */
  closed() {
    this.openId = this.shownId = null;
    this.bar.hidden = true;
    this.bar.replaceChildren();
    this.mark();
  }

  // a snapshot by its time (its id is the trace's: a long number)
  label(id) {
    const s = this.snapshot(id);
    return s ? `the snapshot of ${formatTime(s.taken_at)}` : "the snapshot";
  }

  drawBar(text) {
    this.bar.hidden = false;
    this.bar.replaceChildren(h("span", { "data-testid": "recorder-bar-text", text }), button("← Back to the live recorder", "back-to-live", () => this.onBack(), "kt-button"));
  }

  // the list's item of the snapshot asked for or shown
  mark() {
    for (const li of this.list.children) {
      const open = li.dataset.snapshotId === String(this.openId);
      li.classList.toggle("kt-recorder-item-open", open);
      if (open) li.setAttribute("aria-current", "true");
      else li.removeAttribute("aria-current");
    }
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
}
