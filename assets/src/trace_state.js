// The trace widget's state without the DOM or the server: the trace's status and
// counters as the server last sent them, and the view's pause.
//
// Two pauses (issue 39 item 5). Pause (the view's): the widget freezes its rows at once
// and the trace goes on recording, as in most viewers: events keep arriving and wait in
// `held` (the newest, at most `maxHeld`), the counters keep counting, and Resume (or the
// trace ending) shows them: the view catches up. Nothing is asked of the server. Pause
// tracing (the trace's, `Kino.Trace.pause/1`, the "pause" request, or from code): the
// status is "paused" and nothing is recorded until it resumes.
//
//   const state = new TraceState({ status: "running", maxHeld: 200_000 });
//   state.toggle();            // => []          (frozen)
//   state.receive([e1, e2]);   // => []          (held: [e1, e2])
//   state.toggle();            // => [e1, e2]
//
// Methods return the events the log must show now.

import { formatCount, formatRate } from "./format.js";

export class TraceState {
  /**
   * @param {object} opts status and counters (the connect payload's), maxHeld (at most
   *   this many events wait while the view is paused, the newest; past the log's size the
   *   oldest would be evicted anyway)
   */
  constructor({ status, counters, maxHeld = Infinity } = {}) {
    /** The server's last status: running, paused, stopped, limit_reached or timeout. */
    this.status = status || "running";
    /** The server's last counters (KinoTrace.Widget.Payload's counters map). */
    this.counters = counters || {};
    /** The user paused the view here: incoming events wait in `held`. */
    this.frozen = false;
    /** Events received while frozen, oldest first. */
    this.held = [];
    this.maxHeld = maxHeld;
  }

  /** The status to show: a running trace whose view is paused shows as "frozen". */
  get shownStatus() {
    return this.frozen && this.status === "running" ? "frozen" : this.status;
  }

  /** The trace's recording is paused (on the server): its button offers to resume it. */
  get tracingPaused() {
    return this.status === "paused";
  }

  /** The trace is over (stopped, limit reached, timed out): no more controls. */
  get ended() {
    return !["running", "paused"].includes(this.status);
  }

  /** A batch of events from the server. Returns the ones to show now (none when frozen). */
  receive(events) {
    if (!events || !events.length) return [];
    if (!this.frozen) return events;
    for (const e of events) this.held.push(e);
    if (this.held.length > this.maxHeld) this.held.splice(0, this.held.length - this.maxHeld);
    return [];
  }

  /** The user pressed the view's Pause or Resume. Returns the events to show now. */
  toggle() {
    if (this.frozen) return this.unfreeze();
    this.frozen = true;
    return [];
  }

  /**
   * A status from the server (with its counters, if any). The end of the trace releases
   * the held events. Returns the events to show now.
   */
  serverStatus(status, counters) {
    this.status = status;
    if (counters) this.counters = counters;
    return this.ended ? this.unfreeze() : [];
  }

  /** New counters from the server. */
  setCounters(counters) {
    this.counters = counters;
  }

  /** The log was cleared: what was held goes too; a pause stays. */
  clear() {
    this.held = [];
  }

  /** Ends a freeze; returns the held events (none when not frozen). */
  unfreeze() {
    if (!this.frozen) return [];
    this.frozen = false;
    const held = this.held;
    this.held = [];
    return held;
  }
}

// --- counters ---------------------------------------------------------------------------

/** Why the tracer dropped, in the words of the dropped counter's tooltip. */
export const DROP_LABELS = {
  rate: "over the rate limit",
  queue_full: "queue full",
  max_events: "event limit reached",
  closed: "arrived after stop",
  no_memory: "out of memory",
};

export const EVENTS_TITLE =
  "trace events received: a call and its return are two, each message or process event one (the Log shows a call and its return on one row)";

export const NOT_SHOWN_TITLE =
  "trace events received (counted in the events) that the widget did not send to this browser: it was behind";

const exact = (n) => Number(n || 0).toLocaleString("en-US");

/**
 * What the tracer's drops count, by what the trace traces (the connect payload's
 * `trace`, Kino.Trace.Plan.summary/1): the tracer refuses a call before the VM traces
 * it, and a refused call's return is never traced, so in a trace of calls a drop is a
 * call, where the events counter counts a call and its return as two (issue 39 item 6).
 * In a trace of messages or process events a drop is one event, as the events count.
 * [label, noun for the title]
 */
export function dropUnit(trace) {
  const callsOnly = !trace || (trace.calls && trace.messages == null && trace.processes == null);
  return callsOnly ? [" calls dropped", "calls"] : [" events dropped", "events"];
}

/**
 * The header's counters for the server's counters, the number of held events and what
 * the trace traces, as data for the view: [{counter, value, label, note, title, bad,
 * muted}], in order. `counter` is the element's data-counter (absent for the limit and
 * held notes), `value` the figure shown in bold, `label` the plain text after it (or
 * alone when there is no value), `note` a muted remark after that, `title` the detail on
 * hover. Values are abbreviated (formatCount: at most 5 characters) so the header keeps
 * its layout in a flood; the exact figures and the reasons for drops are in the titles.
 * Each figure's label says what it counts: trace events (a call and its return are two),
 * the calls or events the tracer dropped (dropUnit/1), the events this browser was not
 * sent.
 */
export function counterItems(counters, held = 0, trace = null) {
  const c = counters || {};
  const { display: notShown = 0, ...byReason } = c.dropped || {};
  const dropped = Object.entries(byReason).filter(([, n]) => n > 0);
  const droppedTotal = dropped.reduce((sum, [, n]) => sum + n, 0);
  const [dropLabel, dropNoun] = dropUnit(trace);
  const items = [
    { counter: "events", value: formatCount(c.events || 0), label: " events", title: `${exact(c.events)} ${EVENTS_TITLE}` },
    { counter: "rate", value: formatRate(c.rate), title: "trace events per second, lately" },
    {
      counter: "dropped",
      value: formatCount(droppedTotal),
      label: dropLabel,
      bad: droppedTotal > 0,
      title: droppedTotal
        ? `${exact(droppedTotal)} ${dropNoun} the tracer dropped, not traced:\n` +
          dropped.map(([reason, n]) => `${DROP_LABELS[reason] || reason}: ${exact(n)}`).join("\n") +
          (dropNoun === "calls" ? "\n(a dropped call's return is never traced: the events would have counted it as two)" : "")
        : `no ${dropNoun.slice(0, -1)} dropped`,
    },
  ];
  if (notShown > 0) {
    items.push({ counter: "not-shown", value: formatCount(notShown), label: " not shown", bad: true, muted: true, title: `${exact(notShown)} ${NOT_SHOWN_TITLE}` });
  }
  if (c.limit) items.push({ label: `limit ${formatCount(c.limit)}`, muted: true });
  if (c.stack_guarded) {
    items.push({
      counter: "stack-guarded",
      label: `${formatCount(c.stack_guarded)} ${c.stack_guarded === 1 ? "process" : "processes"} without returns`,
      title: "Processes whose stack kept growing under return tracing: their calls are still traced, their returns no longer",
      muted: true,
    });
  }
  const fallback = c.fallback || [];
  if (fallback.length) {
    items.push({
      counter: "tracer",
      label: fallback.length === 1 ? "pure-Erlang tracer" : `pure-Erlang tracer on ${fallback.length} nodes`,
      title: fallback.map((f) => `${f.node}: ${f.why}`).join("\n") +
        "\nThe native tracer is not running there: every event costs more, and limits apply after the VM copied it",
      muted: true,
    });
  }
  if (held) items.push({ label: `${formatCount(held)} held while paused`, muted: true });
  return items;
}
