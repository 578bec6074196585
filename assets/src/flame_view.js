// The Flame tab: an icicle of the call trees (the root on top, callees below, a frame as
// wide as its total time), drawn on a canvas so 100 000 stacks stay quick: each draw
// visits only the frames in view (FlameModel.row), and skips those under a pixel.
// Click a frame to zoom on it (its callers then span the width; click one to zoom out),
// type in the search box to highlight matching frames (with the share of time they
// cover), hover for the numbers. Frames whose call has no known end (a tail-call loop
// traced without returns, a call still running) are marked `[no return]` by the server
// and drawn hatched: their own time is unknown.
//
// The data is the server's ("get_flame" -> "flame", KinoTrace.Widget.FlamePayload): for
// all processes or the one picked in the selector (`onProcess(pid | null)`).

import { FlameModel } from "./flame_model.js";
import { h, button } from "./dom.js";
import { formatDuration, formatShare } from "./format.js";

export const ROW = 18;
const HEIGHT = 480; // the view's height; deeper stacks scroll
const FONT = "11px ui-monospace, SFMono-Regular, Menlo, monospace";

/** A frame's colour: warm hues by name (the same name, the same colour). */
export function frameColor(name, matched, noReturn) {
  if (matched) return "#c026d3";
  let hash = 0;
  for (let i = 0; i < name.length; i++) hash = (hash * 31 + name.charCodeAt(i)) | 0;
  const hue = 10 + (Math.abs(hash) % 40);
  return noReturn ? "#d4d4d8" : `hsl(${hue}, 85%, ${62 + (Math.abs(hash >> 8) % 14)}%)`;
}

export class FlameView {
  /** @param {HTMLElement} parent @param {object} opts onProcess(pid | null) */
  constructor(parent, { onProcess } = {}) {
    this.model = new FlameModel({ nodes: [-1, -1, 0, 0] });
    this.focus = 0;
    this.focusPath = [];
    this.matches = null; // FlameModel.search's result
    this.hover = -1;
    this.select = h("select", { class: "kt-flame-process", "aria-label": "Process", onchange: () => onProcess && onProcess(this.select.value || null) });
    this.search = h("input", { class: "kt-filter kt-flame-search", type: "search", placeholder: "Search frames…", "aria-label": "Search frames", oninput: () => this.runSearch() });
    this.info = h("span", { class: "kt-muted kt-flame-info", "data-testid": "flame-info" });
    this.reset = button("Reset zoom", "flame-reset", () => this.zoom(0));
    this.canvas = h("canvas", { class: "kt-flame-canvas", "data-testid": "flame-canvas" });
    // the hovered frame's outline, on a canvas of its own: a hover draws only that
    this.overlay = h("canvas", { class: "kt-flame-canvas kt-flame-overlay" });
    this.inner = h("div", { class: "kt-flame-inner" }, this.canvas, this.overlay);
    this.scroller = h("div", { class: "kt-flame-scroll" }, this.inner);
    this.tip = h("div", { class: "kt-flame-tip", hidden: "", "data-testid": "flame-tip" });
    this.empty = h("div", { class: "kt-empty", text: "No calls with a known time yet." });
    this.el = h(
      "div",
      { class: "kt-flame" },
      h("div", { class: "kt-flame-bar" }, this.select, this.search, this.reset, this.info),
      this.empty,
      this.scroller,
      this.tip
    );
    parent.appendChild(this.el);
    this.overlay.addEventListener("mousemove", (e) => this.onMove(e));
    this.overlay.addEventListener("mouseleave", () => this.setHover(-1));
    this.overlay.addEventListener("click", (e) => {
      const i = this.nodeAt(e);
      if (i >= 0) this.zoom(i);
    });
    this.scroller.addEventListener("scroll", () => this.draw());
    // a cell made wider or narrower: the frames take the new width
    if (typeof ResizeObserver === "function") new ResizeObserver(() => this.draw()).observe(this.scroller);
  }

  /** New data from the server; the zoom and the search stay on the same frames. */
  setData(payload) {
    this.model = new FlameModel(payload);
    this.colors = new Array(this.model.frames.length); // a frame's colour, once
    this.focus = this.model.find(this.focusPath);
    this.renderProcesses();
    this.runSearch(false);
    this.draw();
  }

  renderProcesses() {
    const m = this.model;
    const options = [h("option", { value: "", text: "All processes" })];
    for (const p of m.processes) {
      const label = p.name ? `${p.name} ${p.pid}` : p.pid;
      options.push(h("option", { value: p.pid, text: `${label} · ${formatDuration(p.total)}` }));
    }
    if (m.process && !m.processes.some((p) => p.pid === m.process)) options.push(h("option", { value: m.process, text: m.process }));
    this.select.replaceChildren(...options);
    this.select.value = m.process || "";
  }

  zoom(i) {
    this.focus = i;
    this.focusPath = this.model.framePath(i);
    this.runSearch(false);
    this.draw();
  }

  runSearch(draw = true) {
    this.matches = this.search.value.trim() ? this.model.search(this.search.value, this.focus) : null;
    this.renderInfo();
    if (draw) this.draw();
  }

  renderInfo() {
    const m = this.model;
    const parts = [];
    if (this.focus > 0) parts.push(`zoomed on ${m.name(this.focus)}`);
    if (this.matches) {
      const of = m.total[this.focus];
      parts.push(`${this.matches.count} matching ${this.matches.count === 1 ? "frame" : "frames"}, ${formatShare(of ? this.matches.time / of : 0)} of the time`);
    }
    if (m.omitted) parts.push(`${formatDuration(m.omitted)} in stacks left out`);
    this.info.textContent = parts.join(" · ");
    this.reset.disabled = this.focus === 0;
  }

  /** Draws the frames in view. */
  draw() {
    const m = this.model;
    const empty = m.total[0] <= 0;
    this.empty.hidden = !empty;
    this.scroller.hidden = empty;
    if (empty) return;
    const width = Math.max(1, this.scroller.clientWidth || 800);
    const rows = m.maxDepth + 1;
    this.inner.style.height = `${rows * ROW}px`;
    const height = Math.min(rows * ROW, HEIGHT);
    this.scroller.style.height = `${height}px`;
    const top = this.scroller.scrollTop;
    const scale = window.devicePixelRatio || 1;
    for (const c of [this.canvas, this.overlay]) {
      c.style.top = `${top}px`;
      if (c.width !== Math.round(width * scale) || c.height !== Math.round(height * scale)) {
        c.width = Math.round(width * scale);
        c.height = Math.round(height * scale);
        c.style.width = `${width}px`;
        c.style.height = `${height}px`;
      }
    }
    this.view = { width, height, top, scale }; // what the overlay draws over
    const ctx = this.canvas.getContext("2d");
    if (!ctx) return;
    ctx.setTransform(scale, 0, 0, scale, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    const charW = ctx.measureText("m").width || 7;
    const focus = this.focus;
    const from = m.x[focus];
    const span = m.total[focus] || 1;
    const px = width / span;
    const first = Math.floor(top / ROW);
    const last = Math.min(m.maxDepth, Math.ceil((top + height) / ROW));
    const colors = this.colors || [];
    const drawNode = (j, x, w, d) => {
      const y = d * ROW - top;
      const f = m.frame[j];
      const matched = this.matches && j > 0 && this.matches.frames[f] === 1;
      const noReturn = m.isNoReturn(j);
      if (j === 0) ctx.fillStyle = "#e4e4e7";
      else if (matched) ctx.fillStyle = frameColor("", true, false);
      else ctx.fillStyle = colors[f] || (colors[f] = frameColor(m.name(j), false, noReturn));
      ctx.fillRect(x, y, Math.max(w - 1, 0.5), ROW - 1);
      if (noReturn && w > 4) {
        ctx.strokeStyle = "#71717a";
        ctx.setLineDash([3, 2]);
        ctx.strokeRect(x + 0.5, y + 0.5, Math.max(w - 2, 0.5), ROW - 2);
        ctx.setLineDash([]);
      }
      const fits = Math.floor((w - 6) / charW);
      if (fits >= 3) {
        const name = m.name(j);
        const text = name.length > fits ? `${name.slice(0, fits - 1)}…` : name;
        ctx.fillStyle = matched ? "#fff" : "#27272a";
        ctx.fillText(text, x + 3, y + ROW / 2);
      }
    };
    // the focus and its callers span the width
    for (let j = focus; j >= 0; j = m.parent[j]) {
      const d = m.depth[j];
      if (d >= first && d <= last) drawNode(j, 0, width, d);
    }
    for (let d = Math.max(first, m.depth[focus] + 1); d <= last; d++) {
      const [lo, hi] = m.row(d, from, from + span);
      for (let k = lo; k < hi; k++) {
        const j = m.byDepth[k];
        const w = m.total[j] * px;
        if (w < 1) {
          // frames under a pixel are not drawn: skip to the next pixel's
          const next = m.endingAfter(k + 1, hi, from + (Math.floor((m.x[j] - from) * px) + 1) / px);
          k = next - 1;
          continue;
        }
        drawNode(j, (m.x[j] - from) * px, w, d);
      }
    }
    this.drawHover();
  }

  /** The hovered frame's outline, on the overlay. */
  drawHover() {
    const ctx = this.overlay.getContext("2d");
    if (!ctx || !this.view) return;
    const { width, height, top, scale } = this.view;
    ctx.setTransform(scale, 0, 0, scale, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const m = this.model;
    const i = this.hover;
    if (i < 0 || i >= m.size) return;
    const f = this.focus;
    const whole = m.depth[i] <= m.depth[f];
    const x = whole ? 0 : ((m.x[i] - m.x[f]) / (m.total[f] || 1)) * width;
    const w = whole ? width : (m.total[i] / (m.total[f] || 1)) * width;
    ctx.strokeStyle = "#18181b";
    ctx.lineWidth = 1.5;
    ctx.strokeRect(x + 0.75, m.depth[i] * ROW - top + 0.75, Math.max(w - 2, 1), ROW - 2.5);
  }

  nodeAt(event) {
    const rect = this.overlay.getBoundingClientRect();
    const depth = Math.floor((event.clientY - rect.top + this.scroller.scrollTop) / ROW);
    return this.model.hit(this.focus, depth, (event.clientX - rect.left) / rect.width);
  }

  onMove(event) {
    const i = this.nodeAt(event);
    this.setHover(i);
    if (i < 0) return;
    const box = this.el.getBoundingClientRect();
    const y = event.clientY - box.top;
    this.tip.style.left = `${Math.max(0, Math.min(event.clientX - box.left + 12, box.width - 320))}px`;
    // below the mouse, or above it when the view ends first
    const below = y + 16 + this.tip.offsetHeight <= box.height;
    this.tip.style.top = `${below ? y + 16 : Math.max(0, y - 8 - this.tip.offsetHeight)}px`;
  }

  setHover(i) {
    if (i === this.hover) return;
    this.hover = i;
    this.tip.hidden = i < 0;
    if (i >= 0) this.renderTip(i);
    this.drawHover();
  }

  renderTip(i) {
    const m = this.model;
    const all = m.total[0] || 1;
    const lines = [
      h("div", { class: "kt-mono kt-flame-tip-name", text: m.name(i) }),
      h("div", { "data-field": "total", text: `total ${formatDuration(m.total[i])} · ${formatShare(m.total[i] / all)} of all` }),
      h("div", { "data-field": "self", text: m.isNoReturn(i) ? "self unknown: the call's end is not in the trace" : `self ${formatDuration(m.self[i])}` }),
    ];
    if (this.focus > 0) lines.push(h("div", { text: `${formatShare(m.total[i] / (m.total[this.focus] || 1))} of the zoomed frame` }));
    lines.push(h("div", { class: "kt-muted", text: i === this.focus ? "" : "click to zoom" }));
    this.tip.replaceChildren(...lines);
  }
}
