// The sequence tab: processes as lifelines (one column each), messages as arrows between
// them, calls and returns as activation bars and self-arrows on their process, spawns,
// links, exits and names as marks. Live, and readable at any size: every row and every
// column has a fixed size, the view scrolls both ways, and only what is in view is drawn.
//
// SequenceLayout is the pure part (no DOM): it turns the widget's event rows, in order,
// into lanes and rows. SequenceView draws a layout as SVG.

import { formatTime, formatDuration, kindLook, isNormalExit, peerLabel, resultText } from "./format.js";
import { h, svg } from "./dom.js";

/** Geometry of the view, in CSS pixels. */
export const GEOMETRY = { rowHeight: 30, laneWidth: 230, gutter: 104, headerHeight: 46, overscan: 6 };

// Which events are two sides of one thing (a send and its receive, a spawn and the
// child's spawned, a link and the other's linked) is decided once, on the server
// (KinoTrace.Render.Pairs, the rule Mermaid's diagrams follow): the second side to come names
// the first in `pair` (its id). The layout draws the pairs it is given.
const LINKS = { link: true, unlink: true };
const LINKED = { getting_linked: "link", getting_unlinked: "unlink" };

/**
 * Lanes and rows of a sequence diagram, built incrementally from event rows.
 *
 * lanes: [{key, index, pid, name, node, remote, firstSeq, exitSeq, column}] in order of
 * first appearance (`index`, what rows and activations name); `column` is where a lane is
 * drawn: the busiest first (most messages sent and received in the rows kept), then in
 * order of appearance, so that the processes that talk most are in view. rows (from `rowAt`): {seq, type, from, to, label, time, entry, ...} where
 * type is one of
 *   message  an arrow from lane `from` to lane `to` (`entry` the send, `receive` the
 *            receive once seen, or first; `lost` for a send to a process that did not
 *            exist)
 *   found    a message received, its send not seen (yet) (`entry` the receive)
 *   call     a call on lane `from` (`entry` the call, `ret` its return merged when nothing
 *            happened in between)
 *   return   a return or exception on lane `from` (`entry` it, `call` the call's entry)
 *   spawn    lane `from` spawned lane `to`
 *   link     lanes `from` and `to` linked (or unlinked: `unlink`)
 *   exit     lane `from` exited (`label` the reason, `normal` when it was a normal exit)
 *   note     a register or unregister on lane `from`
 * activations: [{lane, from, to, depth, row}] (`to` null while the call runs).
 * At most `maxRows` rows are kept; the oldest go first (`start` is the first kept seq).
 */
export class SequenceLayout {
  constructor({ maxRows = 4000 } = {}) {
    this.maxRows = maxRows;
    this.clear();
  }

  clear() {
    this.lanes = [];
    this.laneByKey = new Map();
    this.columns = []; // lane index of each column
    this.rows = [];
    this.start = 0; // seq of rows[0]
    this.rowById = new Map(); // event id -> the row drawn for it, for its pair's other side
    this.openCalls = new Map(); // call id -> activation
    this.activations = [];
    this.messages = 0;
    this.others = 0; // rows that are neither calls nor returns (messages, spawns, exits...)
    this.version = 0;
  }

  /** Only calls and returns so far: a sequence of nothing but self-arrows. */
  get callsOnly() {
    return this.others === 0 && this.rows.length > 0;
  }

  /** Seq of the next row. */
  get end() {
    return this.start + this.rows.length;
  }

  rowAt(seq) {
    return this.rows[seq - this.start];
  }

  /** The lane of a process (created on first sight). */
  lane(key, fields = {}) {
    let lane = this.laneByKey.get(key);
    if (!lane) {
      lane = { key, index: this.lanes.length, pid: key, name: null, node: null, remote: false, firstSeq: this.end, exitSeq: null, column: this.lanes.length };
      this.lanes.push(lane);
      this.laneByKey.set(key, lane);
    }
    if (fields.name && !lane.name) lane.name = fields.name;
    if (fields.node && !lane.node) lane.node = fields.node;
    if (fields.remote) lane.remote = true;
    return lane;
  }

  laneOf(event) {
    return this.lane(event.pid || "?", { name: event.name, node: event.node, remote: event.remote });
  }

  peerLane(event) {
    if (!event.peer) return null;
    return this.lane(event.peer, { name: event.peer_name, node: event.remote ? null : event.node });
  }

  push(row) {
    if (row.type !== "call" && row.type !== "return") this.others++;
    row.seq = this.end;
    this.rows.push(row);
    return row;
  }

  /** Adds events in order. */
  append(events) {
    for (const event of events) this.add(event);
    this.evict();
    this.arrange();
    this.version++;
  }

  /**
   * Orders the columns: lanes by the messages they sent and received in the rows kept,
   * most first; lanes as busy keep their order of appearance.
   */
  arrange() {
    const busy = new Array(this.lanes.length).fill(0);
    for (const row of this.rows) {
      if (row.type !== "message" && row.type !== "found") continue;
      if (row.from != null) busy[row.from]++;
      if (row.to != null && row.to !== row.from) busy[row.to]++;
    }
    this.columns = this.lanes.map((lane) => lane.index).sort((a, b) => busy[b] - busy[a] || a - b);
    this.columns.forEach((index, column) => (this.lanes[index].column = column));
  }

  /** The column a lane is drawn in. */
  columnOf(index) {
    const lane = this.lanes[index];
    return lane ? lane.column : index;
  }

  add(event) {
    switch (event.kind) {
      case "send":
      case "send_to_non_existing":
        return this.addSend(event);
      case "receive":
        return this.addReceive(event);
      case "call":
        return this.addCall(event);
      case "return":
      case "exception":
        return this.addReturn(event);
      case "spawn":
      case "spawned":
        return this.addSpawn(event);
      case "link":
      case "unlink":
      case "getting_linked":
      case "getting_unlinked":
        return this.addLink(event);
      case "exit": {
        const lane = this.laneOf(event);
        const row = this.push({ type: "exit", from: lane.index, to: lane.index, label: event.data || "", normal: isNormalExit(event.data), time: event.time, entry: event });
        lane.exitSeq = row.seq;
        for (const [id, act] of this.openCalls) {
          if (act.lane === lane.index) {
            act.to = row.seq;
            this.openCalls.delete(id);
          }
        }
        return row;
      }
      case "timeout": {
        // a receive...after that timed out (traced with timeouts: true): no message
        const lane = this.laneOf(event);
        return this.push({ type: "note", from: lane.index, to: lane.index, label: kindLook(event.kind).label, time: event.time, entry: event });
      }
      case "register":
      case "unregister": {
        const lane = this.laneOf(event);
        if (event.kind === "register" && event.data) lane.name = lane.name || event.data;
        return this.push({ type: "note", from: lane.index, to: lane.index, label: `${kindLook(event.kind).label} ${event.data || ""}`, time: event.time, entry: event });
      }
      default:
        return null; // return_to and unknown kinds are not drawn
    }
  }

  // A reply to a process alias (a GenServer call's, since OTP 24) comes with `peer` its
  // owner already, by the rule Mermaid's diagrams follow (KinoTrace.Tracer.Aliases, server side).
  addSend(event) {
    const from = this.laneOf(event);
    const to = this.peerLane(event) || from;
    // its receive came first (clocks of other processes or nodes): the arrow is drawn there
    const found = this.paired(event, "found");
    if (found) {
      Object.assign(found, { type: "message", from: from.index, entry: event, receive: found.entry, time: event.time });
      return this.remember(event, found);
    }
    this.messages++;
    const row = this.push({
      type: "message",
      from: from.index,
      to: to.index,
      label: event.data || "",
      time: event.time,
      entry: event,
      receive: null,
      lost: event.kind === "send_to_non_existing",
    });
    return this.remember(event, row);
  }

  addReceive(event) {
    const sent = this.paired(event, "message");
    if (sent && !sent.receive) {
      sent.receive = event;
      return sent;
    }
    const to = this.laneOf(event);
    this.messages++;
    const row = this.push({ type: "found", from: null, to: to.index, label: event.data || "", time: event.time, entry: event });
    return this.remember(event, row);
  }

  /** The row of the event's other side (`pair`, from the server) when it is kept and of `type`. */
  paired(event, type) {
    const row = event.pair != null ? this.rowById.get(event.pair) : null;
    return row && row.seq >= this.start && (type == null || row.type === type) ? row : null;
  }

  remember(event, row) {
    if (event.id != null) this.rowById.set(event.id, row);
    return row;
  }

  addCall(event) {
    const lane = this.laneOf(event);
    const row = this.push({ type: "call", from: lane.index, to: lane.index, label: event.call || event.mfa || "", time: event.time, entry: event, ret: null });
    const act = { lane: lane.index, from: row.seq, to: null, depth: Math.max(0, event.depth || 0), row };
    this.activations.push(act);
    if (event.id != null) this.openCalls.set(event.id, act);
    return row;
  }

  addReturn(event) {
    const act = event.call_id != null ? this.openCalls.get(event.call_id) : null;
    const lane = act ? this.lanes[act.lane] : this.laneOf(event);
    const outcome = event.kind === "exception" ? event.exception || "exception" : resultText(event.result);
    if (act) this.openCalls.delete(event.call_id);
    // nothing happened since the call: the return joins the call's row
    if (act && act.row.seq === this.end - 1 && act.row.seq >= this.start) {
      act.row.ret = event;
      act.to = act.row.seq;
      return act.row;
    }
    const row = this.push({ type: "return", from: lane.index, to: lane.index, label: outcome, time: event.time, entry: event, call: act ? act.row.entry : null, exception: event.kind === "exception" });
    if (act) act.to = row.seq;
    return row;
  }

  // One arrow from parent to child, drawn by whichever side came first.
  addSpawn(event) {
    const other = this.paired(event, "spawn");
    if (other) return other;
    const self = this.laneOf(event);
    const peer = this.peerLane(event) || self;
    const [parent, child] = event.kind === "spawn" ? [self, peer] : [peer, self];
    const row = this.push({ type: "spawn", from: parent.index, to: child.index, label: `spawn ${event.spawn_mfa || event.data || ""}`, time: event.time, entry: event });
    return this.remember(event, row);
  }

  // One line from the linker to the linked, drawn by whichever side came first.
  addLink(event) {
    const other = this.paired(event, "link");
    if (other) return other;
    const active = event.kind in LINKS; // link/unlink: this process did it
    const kind = active ? event.kind : LINKED[event.kind];
    const self = this.laneOf(event);
    const peer = this.peerLane(event) || self;
    const [from, to] = active ? [self, peer] : [peer, self];
    const row = this.push({ type: "link", unlink: kind === "unlink", from: from.index, to: to.index, label: kind, time: event.time, entry: event });
    return this.remember(event, row);
  }

  evict() {
    const over = this.rows.length - this.maxRows;
    if (over <= 0) return;
    this.rows.splice(0, over);
    this.start += over;
    this.activations = this.activations.filter((a) => a.to == null || a.to >= this.start);
    for (const [id, row] of this.rowById) if (row.seq < this.start) this.rowById.delete(id);
  }

  /** Rows with seq in [first, last), clipped to what is kept. */
  rowsIn(first, last) {
    const from = Math.max(first, this.start) - this.start;
    const to = Math.min(last, this.end) - this.start;
    return from < to ? this.rows.slice(from, to) : [];
  }

  /** Activations that overlap rows [first, last). */
  activationsIn(first, last) {
    return this.activations.filter((a) => a.from < last && (a.to == null ? this.end : a.to) >= first);
  }
}

/**
 * A call as it fits in a lane: the module's last alias only (the tooltip and the
 * details have it whole). `MyApp.Cache.fetch(:users, 1)` -> `Cache.fetch(:users, 1)`.
 */
export function shortCall(text) {
  const m = /^((?:[A-Z][\w]*\.)+)([^.(]+\(.*)$/s.exec(text || "");
  if (!m) return text || "";
  const parts = m[1].split(".").filter(Boolean);
  return `${parts[parts.length - 1]}.${m[2]}`;
}

/** The x of the lifeline in a column (a lane's `column`). */
export function laneX(column, g = GEOMETRY) {
  return g.gutter + column * g.laneWidth + g.laneWidth / 2;
}

/** Rows [first, last) and lanes [firstLane, lastLane) to draw for a scroll position. */
export function visibleWindow(layout, { scrollTop, scrollLeft, height, width }, g = GEOMETRY) {
  const rows = layout.end - layout.start;
  const top = Math.max(0, scrollTop - g.headerHeight);
  const first = layout.start + Math.max(0, Math.floor(top / g.rowHeight) - g.overscan);
  const last = layout.start + Math.min(rows, Math.ceil((top + height) / g.rowHeight) + g.overscan);
  const left = Math.max(0, scrollLeft - g.gutter);
  const firstLane = Math.max(0, Math.floor(left / g.laneWidth) - 1);
  const lastLane = Math.min(layout.lanes.length, Math.ceil((left + width) / g.laneWidth) + 1);
  return { first, last: Math.max(first, last), firstLane, lastLane: Math.max(firstLane, lastLane) };
}

/**
 * Rows [first, last) at least partly in view, below the sticky lane header (no overscan):
 * what "Copy as Mermaid" copies.
 */
export function rowsInView(layout, { scrollTop, height }, g = GEOMETRY) {
  const rows = layout.end - layout.start;
  const first = layout.start + Math.min(rows, Math.max(0, Math.floor(scrollTop / g.rowHeight)));
  const last = layout.start + Math.min(rows, Math.max(0, Math.ceil((scrollTop + height - g.headerHeight) / g.rowHeight)));
  return { first, last: Math.max(first, last) };
}

/** The ids of the events a row shows: its event, and a send's receive or a call's return. */
export function rowEventIds(row) {
  return [row.entry, row.receive, row.ret].filter((e) => e && e.id != null).map((e) => e.id);
}

/** Cuts text to fit `px` pixels of 12px monospace (about 7.2 px a character). */
export function fit(text, px) {
  const max = Math.max(0, Math.floor(px / 7.2));
  if (text.length <= max) return text;
  return max <= 1 ? "…" : text.slice(0, max - 1) + "…";
}

// --- the view ---------------------------------------------------------------------------

export class SequenceView {
  /**
   * @param {HTMLElement} parent
   * @param {object} opts layout (a SequenceLayout), onSelect(row), and onShowCalls(),
   *   which opens the call tree: a trace of calls only has no messages to draw, and says
   *   so with a button to it
   */
  constructor(parent, opts) {
    this.layout = opts.layout;
    this.onSelect = opts.onSelect;
    this.g = { ...GEOMETRY, ...(opts.geometry || {}) };
    this.follow = true;
    this.selected = null;
    this.drawnLanes = -1;

    this.el = h("div", { class: "kt-seq" });
    this.scroller = h("div", { class: "kt-seq-scroll" });
    this.scroller.setAttribute("data-testid", "sequence");
    this.spacer = h("div", { class: "kt-seq-spacer" });
    this.header = h("div", { class: "kt-seq-header" });
    this.corner = h("div", { class: "kt-seq-corner", text: "Time" });
    this.header.appendChild(this.corner);
    this.svg = svg("svg", { class: "kt-seq-svg" });
    this.spacer.append(this.header, this.svg);
    this.scroller.appendChild(this.spacer);
    this.empty = h("div", { class: "kt-empty kt-seq-empty", text: "No messages yet. Trace messages or processes (Kino.Trace.messages/2, processes/2) to see them here." });
    this.callsOnly = h(
      "div",
      { class: "kt-empty kt-seq-empty kt-seq-calls-only", "data-testid": "sequence-calls-only", hidden: "" },
      h("div", { class: "kt-seq-empty-title", text: "No messages in this trace: it traces calls only." }),
      h("div", { text: "The sequence shows messages between processes. The calls of each process are in the call tree." }),
      h("button", { type: "button", class: "kt-button", "data-action": "show-calls", text: "Show the call tree", onclick: () => opts.onShowCalls && opts.onShowCalls() })
    );
    this.el.append(this.scroller, this.empty, this.callsOnly);
    parent.appendChild(this.el);

    this.scroller.addEventListener("scroll", () => {
      this.follow = this.atEnd();
      this.draw();
    });
    this.svg.addEventListener("click", (event) => {
      const target = event.target.closest("[data-seq]");
      if (!target) return;
      const row = this.layout.rowAt(Number(target.dataset.seq));
      if (!row) return;
      this.selected = row;
      this.draw();
      this.onSelect && this.onSelect(row);
    });
  }

  /** The ids of the events of the rows in view, in increasing order. */
  idsInView() {
    const sc = this.scroller;
    const { first, last } = rowsInView(this.layout, { scrollTop: sc.scrollTop, height: sc.clientHeight || 420 }, this.g);
    return this.layout.rowsIn(first, last).flatMap(rowEventIds).sort((a, b) => a - b);
  }

  atEnd() {
    const sc = this.scroller;
    return sc.scrollTop + sc.clientHeight >= sc.scrollHeight - this.g.rowHeight;
  }

  scrollToEnd() {
    this.follow = true;
    this.render();
  }

  /** Call after the layout changed. */
  render() {
    const { layout, g } = this;
    const rows = layout.end - layout.start;
    const shift = (layout.start - (this.lastStart ?? layout.start)) * g.rowHeight;
    this.lastStart = layout.start;
    const width = g.gutter + layout.lanes.length * g.laneWidth + 24;
    const height = g.headerHeight + rows * g.rowHeight + 16;
    this.spacer.style.width = `${width}px`;
    this.spacer.style.height = `${height}px`;
    if (this.follow) this.scroller.scrollTop = this.scroller.scrollHeight;
    else if (shift > 0) this.scroller.scrollTop = Math.max(0, this.scroller.scrollTop - shift); // keep the rows in view
    this.empty.hidden = rows > 0 || layout.lanes.length > 0;
    this.callsOnly.hidden = !layout.callsOnly;
    this.scroller.hidden = !this.empty.hidden || !this.callsOnly.hidden;
    if (this.drawnLanes !== layout.lanes.length || this.namesVersion !== namesOf(layout)) this.drawHeader();
    this.draw();
  }

  drawHeader() {
    const { layout, g } = this;
    const cells = layout.lanes.map((lane) => {
      const cell = h("div", { class: "kt-seq-lane" });
      cell.style.left = `${g.gutter + lane.column * g.laneWidth}px`;
      cell.style.width = `${g.laneWidth}px`;
      cell.dataset.lane = String(lane.index);
      cell.dataset.column = String(lane.column);
      cell.dataset.pid = lane.pid;
      const name = h("div", { class: "kt-seq-lane-name kt-mono", text: lane.name || lane.pid });
      const sub = h("div", { class: "kt-seq-lane-sub kt-mono", text: [lane.name ? lane.pid : "", lane.node && lane.remote ? lane.node : ""].filter(Boolean).join(" · ") });
      cell.title = [lane.name, lane.pid, lane.node].filter(Boolean).join("\n");
      cell.append(name, sub);
      return cell;
    });
    this.header.replaceChildren(this.corner, ...cells);
    this.drawnLanes = layout.lanes.length;
    this.namesVersion = namesOf(layout);
  }

  draw() {
    const { layout, g } = this;
    const sc = this.scroller;
    const view = { scrollTop: sc.scrollTop, scrollLeft: sc.scrollLeft, height: sc.clientHeight || 420, width: sc.clientWidth || 1000 };
    const { first, last, firstLane, lastLane } = visibleWindow(layout, view, g);
    const y = (seq) => g.headerHeight + (seq - layout.start) * g.rowHeight + g.rowHeight / 2;
    const top = g.headerHeight + (first - layout.start) * g.rowHeight;
    const bottom = g.headerHeight + (last - layout.start) * g.rowHeight;
    const col = (i) => layout.columnOf(i);
    const x = (i) => laneX(col(i), g);

    const frag = document.createDocumentFragment();
    const defs = svg("defs");
    defs.append(marker("kt-seq-arrow", "kt-seq-head"), marker("kt-seq-arrow-sel", "kt-seq-head kt-seq-head-sel"), marker("kt-seq-arrow-soft", "kt-seq-head kt-seq-head-soft"));

    // stripes and times
    const gutter = svg("g", { class: "kt-seq-gutter" });
    for (let seq = first; seq < last; seq++) {
      const row = layout.rowAt(seq);
      if (!row) continue;
      const yTop = y(seq) - g.rowHeight / 2;
      if (row === this.selected) gutter.appendChild(svg("rect", { class: "kt-seq-selected", x: 0, y: yTop, width: g.gutter + layout.lanes.length * g.laneWidth, height: g.rowHeight }));
      else if ((seq & 1) === 1) gutter.appendChild(svg("rect", { class: "kt-seq-stripe", x: 0, y: yTop, width: g.gutter + layout.lanes.length * g.laneWidth, height: g.rowHeight }));
      gutter.appendChild(svg("text", { class: "kt-seq-time", x: 10, y: y(seq) + 4 }, formatTime(row.time).slice(3)));
    }
    frag.appendChild(gutter);

    // lifelines: from the lane's first row (top for lanes seen from the start) to its exit
    const lifelines = svg("g", { class: "kt-seq-lifelines" });
    for (let c = firstLane; c < lastLane; c++) {
      const lane = layout.lanes[layout.columns[c] ?? c];
      const i = lane.index;
      const from = Math.max(top, lane.firstSeq > layout.start ? y(lane.firstSeq) - g.rowHeight / 2 : top);
      const to = Math.min(bottom, lane.exitSeq != null ? y(lane.exitSeq) : bottom);
      if (to > from) lifelines.appendChild(svg("line", { class: "kt-seq-lifeline", x1: x(i), x2: x(i), y1: from, y2: to }));
    }
    frag.appendChild(lifelines);

    // activations (calls running)
    const acts = svg("g", { class: "kt-seq-activations" });
    for (const a of layout.activationsIn(first, last)) {
      if (col(a.lane) < firstLane || col(a.lane) >= lastLane) continue;
      const y1 = Math.max(top, y(a.from) - 8);
      const y2 = Math.min(bottom, a.to == null ? bottom : y(a.to) + 8);
      acts.appendChild(svg("rect", { class: "kt-seq-activation" + (a.to == null ? " kt-seq-running" : ""), x: x(a.lane) - 5 + a.depth * 4, y: y1, width: 10, height: Math.max(4, y2 - y1), rx: 2 }));
    }
    frag.appendChild(acts);

    // rows
    const items = svg("g", { class: "kt-seq-items" });
    for (const row of layout.rowsIn(first, last)) {
      const lo = Math.min(col(row.from ?? row.to), col(row.to));
      const hi = Math.max(col(row.from ?? row.to), col(row.to));
      if (hi < firstLane || lo >= lastLane) continue;
      items.appendChild(this.item(row, y(row.seq), x));
    }
    frag.appendChild(items);

    // the SVG covers only the rows drawn; its content keeps the spacer's coordinates
    const shifted = svg("g", { transform: `translate(0 ${-top})` });
    shifted.appendChild(frag);
    this.svg.setAttribute("width", String(g.gutter + layout.lanes.length * g.laneWidth + 24));
    this.svg.setAttribute("height", String(Math.max(0, bottom - top)));
    this.svg.style.top = `${top}px`;
    this.svg.replaceChildren(defs, shifted);
  }

  item(row, y, x) {
    const g = this.g;
    const sel = row === this.selected;
    const group = svg("g", { class: `kt-seq-item kt-seq-t-${row.type}` + (sel ? " kt-seq-item-selected" : ""), "data-seq": row.seq, "data-type": row.type });
    const title = svg("title", {}, tooltip(row));
    group.appendChild(title);
    const hit = (x1, x2) => group.appendChild(svg("rect", { class: "kt-seq-hit", x: Math.min(x1, x2) - 6, y: y - g.rowHeight / 2, width: Math.abs(x2 - x1) + 12, height: g.rowHeight }));
    const arrowHead = sel ? "url(#kt-seq-arrow-sel)" : "url(#kt-seq-arrow)";

    switch (row.type) {
      case "message":
      case "spawn": {
        const x1 = x(row.from);
        const x2 = x(row.to);
        if (row.from === row.to) {
          hit(x1, x1 + 40);
          group.appendChild(svg("path", { class: "kt-seq-line", d: `M${x1 + 6} ${y - 6} h26 v12 h-20`, "marker-end": arrowHead }));
          group.appendChild(svg("text", { class: "kt-seq-label", x: x1 + 38, y: y + 4 }, fit(row.label, g.laneWidth - 46)));
          break;
        }
        const dir = x2 > x1 ? 1 : -1;
        hit(x1, x2);
        const pending = row.type === "message" && !row.receive && !row.lost;
        group.appendChild(
          svg("line", {
            class: "kt-seq-line" + (row.type === "spawn" ? " kt-seq-dashed" : "") + (pending ? " kt-seq-pending" : "") + (row.lost ? " kt-seq-lost" : ""),
            x1: x1 + dir * 6,
            x2: x2 - dir * 8,
            y1: y,
            y2: y,
            "marker-end": row.lost ? null : arrowHead,
          })
        );
        if (row.lost) group.appendChild(cross(x2 - dir * 10, y, "kt-seq-lost-x"));
        const span = Math.abs(x2 - x1) - 20;
        const label = svg("text", { class: "kt-seq-label", x: (x1 + x2) / 2, y: y - 5, "text-anchor": "middle" }, fit(row.label, span));
        group.appendChild(label);
        group.appendChild(svg("circle", { class: "kt-seq-dot", cx: x1, cy: y, r: 3 }));
        break;
      }
      case "found": {
        const x2 = x(row.to);
        const x1 = x2 - Math.min(g.laneWidth * 0.6, 110);
        hit(x1, x2);
        group.appendChild(svg("circle", { class: "kt-seq-found-dot", cx: x1, cy: y, r: 4 }));
        group.appendChild(svg("line", { class: "kt-seq-line kt-seq-soft", x1: x1 + 4, x2: x2 - 8, y1: y, y2: y, "marker-end": sel ? arrowHead : "url(#kt-seq-arrow-soft)" }));
        group.appendChild(svg("text", { class: "kt-seq-label kt-seq-label-soft", x: x2 + 10, y: y + 4 }, fit(`← ${row.label}`, g.laneWidth / 2 + 60)));
        break;
      }
      case "call": {
        const x1 = x(row.from) + 5;
        hit(x1 - 10, x1 + g.laneWidth - 20);
        group.appendChild(svg("path", { class: "kt-seq-line kt-seq-call-line", d: `M${x1} ${y - 6} h12 v8 h-8`, "marker-end": arrowHead }));
        const ret = row.ret ? (row.ret.kind === "exception" ? ` ${row.ret.exception}` : ` ${resultText(row.ret.result)}`) : "";
        const text = svg("text", { class: "kt-seq-label kt-seq-call", x: x1 + 18, y: y + 4 }, fit(shortCall(row.label) + ret, g.laneWidth - 26));
        if (row.ret && row.ret.kind === "exception") text.classList.add("kt-seq-bad");
        group.appendChild(text);
        break;
      }
      case "return": {
        const x1 = x(row.from) + 5;
        hit(x1 - 10, x1 + g.laneWidth - 20);
        group.appendChild(svg("path", { class: "kt-seq-line kt-seq-dashed", d: `M${x1 + 12} ${y - 4} h-10`, "marker-end": arrowHead }));
        group.appendChild(svg("text", { class: "kt-seq-label kt-seq-result" + (row.exception ? " kt-seq-bad" : ""), x: x1 + 18, y: y + 4 }, fit(row.label, g.laneWidth - 30)));
        break;
      }
      case "link": {
        const x1 = x(row.from);
        const x2 = x(row.to);
        hit(x1, x2);
        group.appendChild(svg("line", { class: "kt-seq-line kt-seq-link" + (row.unlink ? " kt-seq-unlink" : ""), x1, x2, y1: y, y2: y }));
        group.appendChild(svg("circle", { class: "kt-seq-link-end", cx: x1, cy: y, r: 3 }));
        group.appendChild(svg("circle", { class: "kt-seq-link-end", cx: x2, cy: y, r: 3 }));
        group.appendChild(svg("text", { class: "kt-seq-label kt-seq-label-soft", x: (x1 + x2) / 2, y: y - 5, "text-anchor": "middle" }, row.label));
        break;
      }
      case "exit": {
        const x1 = x(row.from);
        hit(x1 - 10, x1 + g.laneWidth / 2);
        group.appendChild(cross(x1, y, row.normal ? "kt-seq-exit-x" : "kt-seq-exit-x kt-seq-crash"));
        group.appendChild(svg("text", { class: "kt-seq-label" + (row.normal ? " kt-seq-label-soft" : " kt-seq-bad"), x: x1 + 12, y: y + 4 }, fit(`exit ${row.label}`, g.laneWidth - 20)));
        break;
      }
      case "note": {
        const x1 = x(row.from);
        const text = fit(row.label, g.laneWidth - 24);
        const w = text.length * 7.2 + 14;
        hit(x1 - w / 2, x1 + w / 2);
        group.appendChild(svg("rect", { class: "kt-seq-note", x: x1 - w / 2, y: y - 10, width: w, height: 20, rx: 4 }));
        group.appendChild(svg("text", { class: "kt-seq-label kt-seq-note-text", x: x1, y: y + 4, "text-anchor": "middle" }, text));
        break;
      }
    }
    // the hit area goes on top: it takes the clicks and the hover anywhere on the row's item
    const hitArea = group.querySelector(".kt-seq-hit");
    if (hitArea) group.appendChild(hitArea);
    return group;
  }
}

function namesOf(layout) {
  return layout.lanes.map((l) => `${l.name}|${l.node}|${l.column}`).join(",");
}

function marker(id, cls) {
  const m = svg("marker", { id, viewBox: "0 0 10 10", refX: 8, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
  m.appendChild(svg("path", { d: "M0 0 L10 5 L0 10 z", class: cls }));
  return m;
}

function cross(cx, cy, cls) {
  return svg("path", { class: cls, d: `M${cx - 5} ${cy - 5} L${cx + 5} ${cy + 5} M${cx + 5} ${cy - 5} L${cx - 5} ${cy + 5}` });
}

/** The tooltip of a row (the full label; the click shows the full terms). */
export function tooltip(row) {
  const e = row.entry || {};
  switch (row.type) {
    case "message":
      return `${e.name || e.pid} → ${peerLabel(e)}\n${row.label}${row.receive ? "" : row.lost ? "\n(no such process)" : "\n(not received yet)"}`;
    case "found":
      return `received by ${e.name || e.pid}\n${row.label}`;
    case "call":
      return row.ret ? `${row.label}\n${row.ret.kind === "exception" ? row.ret.exception : resultText(row.ret.result)} (${formatDuration(row.ret.duration)})` : row.label;
    default:
      return row.label;
  }
}

/**
 * The log-style entry the detail panel shows for a row: a call with its return merged, a
 * send with its receive (`receiveId`, `received`), or the event itself.
 */
export function detailEntry(row) {
  const e = row.entry;
  if (row.type === "call") {
    const r = row.ret;
    return { ...e, returnId: r ? r.id : null, result: r && r.kind === "return" ? r.result : null, exception: r && r.kind === "exception" ? r.exception : null, duration: r ? r.duration : null };
  }
  if (row.type === "return" && row.call) {
    return { ...row.call, returnId: e.id, result: e.kind === "return" ? e.result : null, exception: e.kind === "exception" ? e.exception : null, duration: e.duration };
  }
  if (row.type === "message" && row.receive) return { ...e, receiveId: row.receive.id, received: row.receive.time };
  return { ...e };
}
