// The widget's data, without the DOM: the log entries (calls merged with their returns),
// the filtered view, live per-function statistics and per-process call trees.
//
// The server sends events; a `call` becomes an entry and its later `return` or
// `exception` (found by `call_id`) completes that entry with the result and duration.
// Other events (message and process events, returns whose call is not held) are
// entries of their own. At most `maxEntries` entries are held; the oldest go first.

import { entryText, entryOutcome, who, isMessageKind } from "./format.js";

export class LogModel {
  constructor({ maxEntries = 200_000 } = {}) {
    this.maxEntries = maxEntries;
    this.clear();
  }

  clear() {
    // entries[start..] are live; dropped ones are compacted away in bulk.
    this.entries = [];
    this.start = 0;
    this.byCallId = new Map();
    this.filter = "";
    this.filtered = null; // array of entries matching the filter, or null when no filter
    this.stats = new Map(); // mfa -> {mfa, count, total, timed, max, exceptions}
    this.nodes = new Set();
    this.messages = 0; // message and process events received
    this.timed = 0; // events with a duration received (none in a trace without returns)
    this.outcomes = 0; // events with something for the Result column (a return, a send...)
    this.remote = 0; // events of processes on other nodes than the widget's
    this.received = 0;
    this.version = 0;
  }

  get size() {
    return this.entries.length - this.start;
  }

  /** The entries currently shown (all, or the filtered ones). */
  get viewLength() {
    return this.filtered ? this.filtered.length : this.size;
  }

  viewAt(i) {
    return this.filtered ? this.filtered[i] : this.entries[this.start + i];
  }

  all() {
    return this.entries.slice(this.start);
  }

  /** Adds a batch of events (oldest first). Returns the number of new entries. */
  append(events) {
    let added = 0;
    for (const event of events) {
      this.received++;
      if (event.node) this.nodes.add(event.node);
      if (isMessageKind(event.kind)) this.messages++;
      if (event.duration != null) this.timed++;
      if (event.remote) this.remote++;
      if (entryOutcome(event) || event.kind === "return" || event.kind === "exception") this.outcomes++;
      this.countStats(event);

      if ((event.kind === "return" || event.kind === "exception") && event.call_id != null) {
        const entry = this.byCallId.get(event.call_id);
        if (entry) {
          this.complete(entry, event);
          continue;
        }
      }

      const entry = { ...event, returnId: null, search: null };
      this.entries.push(entry);
      if (entry.kind === "call" && entry.id != null) this.byCallId.set(entry.id, entry);
      if (this.filtered && this.matches(entry)) this.filtered.push(entry);
      added++;
    }
    this.evict();
    this.version++;
    return added;
  }

  complete(entry, event) {
    const wasMatch = this.filtered ? this.matches(entry) : true;
    entry.returnId = event.id;
    entry.duration = event.duration;
    entry.truncated = entry.truncated || event.truncated;
    if (event.kind === "return") entry.result = event.result;
    else entry.exception = event.exception;
    entry.search = null;
    this.byCallId.delete(entry.id);
    if (this.filtered && !wasMatch && this.matches(entry)) insertById(this.filtered, entry);
  }

  countStats(event) {
    // calls only: message and process events have no function, return_to is no call
    if (!event.mfa || !["call", "return", "exception"].includes(event.kind)) return;
    let s = this.stats.get(event.mfa);
    if (!s) {
      s = { mfa: event.mfa, label: event.mfa_label || undefined, count: 0, total: 0, timed: 0, max: 0, exceptions: 0 };
      this.stats.set(event.mfa, s);
    }
    if (event.kind === "call") s.count++;
    if ((event.kind === "return" || event.kind === "exception") && event.duration != null) {
      s.total += event.duration;
      s.timed++;
      if (event.duration > s.max) s.max = event.duration;
    }
    if (event.kind === "exception") s.exceptions++;
  }

  /**
   * Per-function rows for the stats table: `label` is how the function reads (when it
   * differs from `mfa`); the times are null when no return was timed (a trace without
   * returns does not know them).
   */
  statsRows() {
    return Array.from(this.stats.values(), (s) => ({
      mfa: s.mfa,
      label: s.label,
      count: s.count,
      total: s.timed ? s.total : null,
      mean: s.timed ? s.total / s.timed : null,
      max: s.timed ? s.max : null,
      exceptions: s.exceptions,
    }));
  }

  evict() {
    const over = this.size - this.maxEntries;
    if (over <= 0) return;
    for (let i = this.start; i < this.start + over; i++) {
      const e = this.entries[i];
      if (e.kind === "call") this.byCallId.delete(e.id);
    }
    this.start += over;
    if (this.filtered) {
      const firstKept = this.entries[this.start];
      let cut = 0;
      while (cut < this.filtered.length && this.filtered[cut].id < firstKept.id) cut++;
      if (cut) this.filtered.splice(0, cut);
    }
    // compact when the dead prefix grows large, so memory stays bounded
    if (this.start > this.maxEntries / 2) {
      this.entries = this.entries.slice(this.start);
      this.start = 0;
    }
  }

  /** Sets the search text; entries match when any shown field contains it (case-insensitive). */
  setFilter(text) {
    this.filter = (text || "").trim().toLowerCase();
    if (!this.filter) {
      this.filtered = null;
    } else {
      const out = [];
      for (let i = this.start; i < this.entries.length; i++) {
        if (this.matches(this.entries[i])) out.push(this.entries[i]);
      }
      this.filtered = out;
    }
    this.version++;
  }

  matches(entry) {
    if (!this.filter) return true;
    if (entry.search == null) {
      entry.search = [who(entry), entry.pid, entry.node, entry.peer, entryText(entry), entryOutcome(entry), entry.caller]
        .join(" ")
        .toLowerCase();
    }
    return entry.search.includes(this.filter);
  }

  /**
   * Call trees of the last `limit` entries, per process: [{pid, label, roots}], each
   * node {entry, children}. Processes are ordered by their latest activity.
   */
  callTrees(limit = 3000) {
    const from = Math.max(this.start, this.entries.length - limit);
    const perPid = new Map();
    for (let i = from; i < this.entries.length; i++) {
      const entry = this.entries[i];
      if (entry.kind !== "call") continue;
      const key = entry.pid || "";
      let tree = perPid.get(key);
      if (!tree) {
        tree = { pid: entry.pid, label: who(entry), roots: [], stack: [], last: 0 };
        perPid.set(key, tree);
      }
      tree.last = i;
      const depth = Math.max(0, entry.depth || 0);
      const node = { entry, children: [] };
      tree.stack.length = Math.min(tree.stack.length, depth);
      const parent = tree.stack[tree.stack.length - 1];
      if (parent && tree.stack.length === depth) parent.children.push(node);
      else tree.roots.push(node);
      tree.stack.push(node);
    }
    return Array.from(perPid.values())
      .sort((a, b) => b.last - a.last)
      .map(({ pid, label, roots }) => ({ pid, label, roots }));
  }
}

function insertById(list, entry) {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (list[mid].id < entry.id) lo = mid + 1;
    else hi = mid;
  }
  list.splice(lo, 0, entry);
}
