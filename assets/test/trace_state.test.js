import { describe, it, expect } from "vitest";
import { TraceState, counterItems, EVENTS_TITLE, NOT_SHOWN_TITLE } from "../src/trace_state.js";

let nextId = 1;
const batch = (n) => Array.from({ length: n }, () => ({ id: nextId++, kind: "call", mfa: "M.f/1" }));
const ids = (events) => events.map((e) => e.id);

// The user pressed the view's Pause on a running trace.
function pausedHere(opts = {}) {
  const state = new TraceState({ status: "running", ...opts });
  expect(state.toggle()).toEqual([]);
  return state;
}

// issue 39 item 5: Pause freezes the view while the trace goes on recording (it asked the
// server to pause the trace, so calls made meanwhile were never recorded); the trace's own
// pause is the server's status
describe("TraceState: the view's pause", () => {
  it("starts from the connect payload with every field declared", () => {
    const state = new TraceState({ status: "running", counters: { events: 3 }, maxHeld: 10 });
    expect({ ...state }).toEqual({ status: "running", counters: { events: 3 }, frozen: false, held: [], maxHeld: 10 });
    expect(new TraceState()).toMatchObject({ status: "running", counters: {}, frozen: false, held: [], maxHeld: Infinity });
    expect(new TraceState({ status: null, counters: null })).toMatchObject({ status: "running", counters: {} });
  });

  it("while running, every batch is shown at once", () => {
    const state = new TraceState({ status: "running" });
    const events = batch(3);
    expect(state.receive(events)).toBe(events);
    expect(state.receive([])).toEqual([]);
    expect(state.receive(undefined)).toEqual([]);
    expect(state.held).toEqual([]);
    expect([state.shownStatus, state.tracingPaused, state.ended]).toEqual(["running", false, false]);
  });

  it("pause freezes the view at once; the trace still runs", () => {
    const state = pausedHere();
    expect([state.frozen, state.status, state.tracingPaused]).toEqual([true, "running", false]);
    expect(state.shownStatus).toBe("frozen");
  });

  it("events still arrive while the view is paused: held in order, not shown, counters kept", () => {
    const state = pausedHere();
    const a = batch(2);
    const b = batch(3);
    expect(state.receive(a)).toEqual([]);
    state.setCounters({ events: 5 });
    expect(state.receive(b)).toEqual([]);
    expect(ids(state.held)).toEqual(ids([...a, ...b]));
    expect(state.counters).toEqual({ events: 5 });
  });

  it("at most maxHeld events are held: the newest", () => {
    const state = pausedHere({ maxHeld: 4 });
    const events = batch(3);
    const more = batch(3);
    state.receive(events);
    state.receive(more);
    expect(ids(state.held)).toEqual(ids([...events, ...more]).slice(2));
  });

  it("resume releases what was held, oldest first: the view catches up", () => {
    const state = pausedHere();
    const held = batch(3);
    state.receive(held);
    expect(ids(state.toggle())).toEqual(ids(held));
    expect([state.frozen, state.held, state.shownStatus]).toEqual([false, [], "running"]);
    const next = batch(1);
    expect(state.receive(next)).toBe(next);
  });

  it("the trace's own pause and resume (statuses from the server) leave the view's pause alone", () => {
    const state = pausedHere();
    state.receive(batch(2));
    expect(state.serverStatus("paused")).toEqual([]);
    expect([state.frozen, state.tracingPaused, state.shownStatus, state.held.length]).toEqual([true, true, "paused", 2]);
    expect(state.serverStatus("running")).toEqual([]);
    expect([state.frozen, state.tracingPaused, state.shownStatus]).toEqual([true, false, "frozen"]);
  });

  it("the trace ending releases the hold", () => {
    for (const end of ["stopped", "limit_reached", "timeout"]) {
      const state = pausedHere();
      const held = batch(2);
      state.receive(held);
      expect(ids(state.serverStatus(end))).toEqual(ids(held));
      expect([state.frozen, state.ended, state.tracingPaused, state.shownStatus]).toEqual([false, true, false, end]);
    }
  });

  it("reload while tracing is paused: the view is not frozen, events are shown", () => {
    const state = new TraceState({ status: "paused" });
    expect([state.frozen, state.shownStatus, state.tracingPaused]).toEqual([false, "paused", true]);
    const events = batch(2);
    expect(state.receive(events)).toBe(events);
  });

  it("reload after the trace ended: no controls, nothing held", () => {
    const state = new TraceState({ status: "stopped", counters: { events: 5 } });
    expect([state.ended, state.tracingPaused, state.shownStatus]).toEqual([true, false, "stopped"]);
  });

  it("clearing drops what was held but stays paused", () => {
    const state = pausedHere();
    state.receive(batch(3));
    state.clear();
    expect([state.frozen, state.held]).toEqual([true, []]);
    const after = batch(1);
    state.receive(after);
    expect(ids(state.toggle())).toEqual(ids(after));
  });

  it("counters: replaced by a status only when it brings some; always by setCounters", () => {
    const state = new TraceState({ status: "running", counters: { events: 1 } });
    state.serverStatus("paused");
    expect(state.counters).toEqual({ events: 1 });
    state.serverStatus("running", { events: 2 });
    expect(state.counters).toEqual({ events: 2 });
    state.setCounters({ events: 3 });
    expect(state.counters).toEqual({ events: 3 });
  });
});

describe("counterItems: the header's counters", () => {
  it("names the pure-Erlang tracer and, in its title, each node's reason", () => {
    const one = counterItems({ fallback: [{ node: "a@h", why: "the native tracer was not built" }] });
    const tracer = one.find((i) => i.counter === "tracer");
    expect(tracer.label).toBe("pure-Erlang tracer");
    expect(tracer.title).toContain("a@h: the native tracer was not built");
    const two = counterItems({ fallback: [{ node: "a@h", why: "x" }, { node: "b@h", why: "y" }] });
    expect(two.find((i) => i.counter === "tracer").label).toBe("pure-Erlang tracer on 2 nodes");
    expect(counterItems({ fallback: [] }).some((i) => i.counter === "tracer")).toBe(false);
  });

  it("with nothing counted: events, rate and dropped, at zero", () => {
    expect(counterItems({})).toEqual([
      { counter: "events", value: "0", label: " events", title: `0 ${EVENTS_TITLE}` },
      { counter: "rate", value: "0/s", title: "trace events per second, lately" },
      { counter: "dropped", value: "0", label: " calls dropped", bad: false, title: "no call dropped" },
    ]);
    expect(counterItems(null)).toEqual(counterItems({}));
  });

  it("formats events and the rate compactly", () => {
    const [events, rate] = counterItems({ events: 1234, rate: 5.5 });
    expect(events.value).toBe("1.23k");
    expect(rate.value).toBe("5.5/s");
    expect(counterItems({ rate: 2500 })[1].value).toBe("2.5k/s");
  });

  // issue 25 item 1: a short figure that keeps the header still, the reasons on hover;
  // issue 39 item 6: each figure says its unit (the tracer drops calls, where the events
  // count a call and its return as two), and events not sent to the browser are apart
  it("sums the tracer's drops into one short figure of calls, marks them bad, and names each reason in the title", () => {
    const [, , dropped, notShown] = counterItems({ dropped: { rate: 3, queue_full: 0, max_events: 1490, closed: 1, display: 2, something_new: 4 } });
    expect(dropped).toEqual({
      counter: "dropped",
      value: "1.5k",
      label: " calls dropped",
      bad: true,
      title: [
        "1,498 calls the tracer dropped, not traced:",
        "over the rate limit: 3",
        "event limit reached: 1,490",
        "arrived after stop: 1",
        "something_new: 4",
        "(a dropped call's return is never traced: the events would have counted it as two)",
      ].join("\n"),
    });
    expect(notShown).toEqual({ counter: "not-shown", value: "2", label: " not shown", bad: true, muted: true, title: `2 ${NOT_SHOWN_TITLE}` });
    expect(counterItems({ dropped: { rate: 0 } })[2]).toMatchObject({ value: "0", bad: false, title: "no call dropped" });
    const flood = counterItems({ events: 24_000_000, dropped: { display: 2_250_000, queue_full: 5_250_000 } });
    expect(flood.map((i) => [i.value, i.label])).toEqual([["24M", " events"], ["0/s", undefined], ["5.25M", " calls dropped"], ["2.25M", " not shown"]]);
    expect(flood[2].title).toContain("queue full: 5,250,000");
    expect(flood[0].title).toContain("24,000,000 trace events received: a call and its return are two");
  });

  it("counts the drops of a trace of messages or process events as events", () => {
    const trace = { calls: false, messages: ":counter", processes: null };
    const dropped = counterItems({ dropped: { queue_full: 7 } }, 0, trace)[2];
    expect([dropped.label, dropped.title]).toEqual([" events dropped", "7 events the tracer dropped, not traced:\nqueue full: 7"]);
    expect(counterItems({}, 0, { calls: true, messages: null, processes: null })[2].label).toBe(" calls dropped");
    expect(counterItems({}, 0, { calls: true, messages: null, processes: ":all" })[2].label).toBe(" events dropped");
  });

  it("adds the limit, the stack-guarded processes and the held events when there are any", () => {
    const items = counterItems({ events: 10, limit: 10_000, stack_guarded: 1 }, 1500);
    expect(items.slice(3)).toEqual([
      { label: "limit 10k", muted: true },
      {
        counter: "stack-guarded",
        label: "1 process without returns",
        title: "Processes whose stack kept growing under return tracing: their calls are still traced, their returns no longer",
        muted: true,
      },
      { label: "1.5k held while paused", muted: true },
    ]);
    expect(counterItems({ stack_guarded: 3 })[3].label).toBe("3 processes without returns");
    expect(counterItems({ limit: 0, stack_guarded: 0 }, 0)).toHaveLength(3);
  });
});
