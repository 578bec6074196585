// @vitest-environment jsdom
import { describe, it, expect } from "vitest";
import { SequenceLayout, SequenceView, visibleWindow, rowsInView, rowEventIds, fit, detailEntry, laneX, GEOMETRY } from "../src/sequence.js";

const A = "#PID<0.100.0>";
const B = "#PID<0.101.0>";
const C = "#PID<0.102.0>";
let id = 1;
let t = 1_700_000_000_000_000;
const ev = (kind, pid, fields = {}) => ({ id: id++, kind, pid, node: "a@h", time: (t += 10), depth: 0, ...fields });
const send = (from, to, data, f = {}) => ev("send", from, { peer: to, data, ...f });
const recv = (pid, data, f = {}) => ev("receive", pid, { data, ...f });
// The receive of a send, which names it as its pair (the server pairs them: KinoTrace.Render.Pairs).
const recvOf = (s, f = {}) => recv(s.peer, s.data, { pair: s.id, ...f });

describe("SequenceLayout", () => {
  it("a lane per process in order of appearance, receivers included", () => {
    const l = new SequenceLayout();
    const s = send(A, B, "{:ping, 1}");
    l.append([s, recvOf(s), send(B, C, ":hi")]);
    expect(l.lanes.map((x) => x.key)).toEqual([A, B, C]);
    expect(l.lanes.map((x) => x.index)).toEqual([0, 1, 2]);
  });

  it("draws the busiest lanes first: a trace of calls and messages puts the processes that talk in view", () => {
    // issue 25: the user's own process was the fourth lane, off screen, behind lanes of calls
    const D = "#PID<0.103.0>";
    const l = new SequenceLayout();
    const call = (pid) => ev("call", pid, { call: "M.f()" });
    const [ping, pong] = [send(D, A, ":ping"), send(A, D, ":pong")];
    l.append([call(A), call(B), call(C), ping, recvOf(ping), pong, recvOf(pong), send(D, B, ":hi")]);
    expect(l.lanes.map((x) => x.key)).toEqual([A, B, C, D]); // identity: order of appearance
    expect(l.columns.map((i) => l.lanes[i].key)).toEqual([D, A, B, C]); // D: 3 messages, A: 2, B: 1
    expect(l.lanes.map((x) => x.column)).toEqual([1, 2, 3, 0]);
    expect(l.columnOf(l.laneByKey.get(D).index)).toBe(0);
  });

  it("lanes as busy keep their order of appearance, and the order follows the rows kept", () => {
    const l = new SequenceLayout({ maxRows: 2 });
    const [s1, s2, s3] = [send(A, B, ":1"), send(C, B, ":2"), send(C, A, ":3")];
    l.append([s1, recvOf(s1)]);
    expect(l.columns).toEqual([0, 1]);
    l.append([s2, recvOf(s2), s3, recvOf(s3)]);
    // kept: C→B and C→A; C sent 2, A and B received 1 each
    expect(l.columns.map((i) => l.lanes[i].key)).toEqual([C, A, B]);
  });

  it("draws a send and the receive that names it as its pair as one arrow, from the sender's lane to the receiver's", () => {
    const l = new SequenceLayout();
    const s1 = send(A, B, "{:ping, 1}");
    const r1 = recvOf(s1);
    const s2 = send(B, A, "{:pong, 10}");
    const r2 = recvOf(s2);
    l.append([s1, r1, s2, r2]);
    const rows = l.rowsIn(l.start, l.end);
    expect(rows.map((r) => [r.type, r.from, r.to, r.label])).toEqual([
      ["message", 0, 1, "{:ping, 1}"],
      ["message", 1, 0, "{:pong, 10}"],
    ]);
    expect(rows[0].entry).toBe(s1);
    expect(rows[0].receive).toBe(r1);
    expect(rows[1].receive).toBe(r2);
    expect(l.messages).toBe(2);
  });

  it("pairs only what the server paired: an equal message with no pair is another arrow, the pair may come in a later batch", () => {
    const l = new SequenceLayout();
    const s1 = send(A, B, ":tick");
    const s2 = send(A, B, ":tick");
    const s3 = send(A, C, ":tick");
    const rc = recvOf(s3);
    const rb1 = recvOf(s1);
    l.append([s1, s2, s3, rc, rb1]);
    const [m1, m2, m3] = l.rowsIn(l.start, l.end);
    expect(m1.receive).toBe(rb1);
    expect(m2.receive).toBe(null);
    expect(m3.receive).toBe(rc);
    const rb2 = recvOf(s2);
    l.append([rb2]);
    expect(m2.receive).toBe(rb2);
    expect(l.end - l.start).toBe(3);
    // a receive with no pair is a found message, even of a message sent before
    l.append([recv(B, ":tick")]);
    expect(l.rowAt(3)).toMatchObject({ type: "found", label: ":tick" });
  });

  it("a receive whose send is not seen is a found message; the send that comes after and names it makes it an arrow", () => {
    const l = new SequenceLayout();
    const r = recv(B, ":go");
    l.append([r]);
    expect(l.rowAt(0)).toMatchObject({ type: "found", from: null, to: 0, label: ":go" });
    // the send's clock was a little behind: the server paired it with the receive before it
    const s = send(A, B, ":go", { time: r.time - 5, pair: r.id });
    l.append([s]);
    expect(l.end - l.start).toBe(1);
    expect(l.rowAt(0)).toMatchObject({ type: "message", from: l.laneByKey.get(A).index, to: 0, entry: s, receive: r });
    expect(l.messages).toBe(1);
    // an equal send with no pair is an arrow of its own
    l.append([send(A, B, ":go")]);
    expect(l.rowAt(1)).toMatchObject({ type: "message", receive: null });
  });

  it("calls are activations; a return right after its call joins the call's row", () => {
    const l = new SequenceLayout();
    const c1 = ev("call", A, { call: "M.outer(1)", mfa: "M.outer/1" });
    const c2 = ev("call", A, { call: "M.inner(1)", mfa: "M.inner/1", depth: 1 });
    const r2 = ev("return", A, { call_id: c2.id, result: "2", mfa: "M.inner/1", depth: 1 });
    const s = send(A, B, "{:result, 2}");
    const r1 = ev("return", A, { call_id: c1.id, result: ":ok", mfa: "M.outer/1" });
    l.append([c1, c2, r2, s, r1]);
    const rows = l.rowsIn(l.start, l.end);
    expect(rows.map((r) => r.type)).toEqual(["call", "call", "message", "return"]);
    expect(rows[1].ret).toBe(r2);
    expect(rows[3]).toMatchObject({ label: "-> :ok", call: c1 });
    const acts = l.activationsIn(l.start, l.end).map((a) => [a.lane, a.from, a.to, a.depth]);
    expect(acts).toEqual([
      [0, 0, 3, 0],
      [0, 1, 1, 1],
    ]);
  });

  it("callsOnly: only calls and returns so far; a message or a process event ends it, clear starts again", () => {
    const l = new SequenceLayout();
    expect(l.callsOnly).toBe(false);
    const c = ev("call", A, { call: "M.f(1)", mfa: "M.f/1" });
    l.append([c, ev("call", B, { call: "M.g()", mfa: "M.g/0" }), ev("return", A, { call_id: c.id, result: "1" })]);
    expect(l.callsOnly).toBe(true);
    l.append([ev("exit", B, { data: ":normal" })]);
    expect(l.callsOnly).toBe(false);
    l.clear();
    l.append([ev("call", A, { call: "M.f(1)" })]);
    expect(l.callsOnly).toBe(true);
    l.append([send(A, B, ":hi")]);
    expect(l.callsOnly).toBe(false);
  });

  it("a calls-only sequence says there are no messages and offers the call tree", () => {
    const parent = document.createElement("div");
    const l = new SequenceLayout();
    let opened = 0;
    const view = new SequenceView(parent, { layout: l, onShowCalls: () => opened++ });
    l.append([ev("call", A, { call: "M.f(1)" })]);
    view.render();
    const note = parent.querySelector('[data-testid="sequence-calls-only"]');
    expect(note.hidden).toBe(false);
    expect(view.scroller.hidden).toBe(true);
    expect(note.textContent).toContain("No messages in this trace");
    note.querySelector('[data-action="show-calls"]').click();
    expect(opened).toBe(1);
    l.append([send(A, B, ":hi")]);
    view.render();
    expect(note.hidden).toBe(true);
    expect(view.scroller.hidden).toBe(false);
  });

  it("an exception ends its activation and is marked", () => {
    const l = new SequenceLayout();
    const c = ev("call", A, { call: "M.f(-1)" });
    const x = ev("call", A, { call: "M.g()", depth: 1 });
    const e = ev("exception", A, { call_id: c.id, exception: "** (ArgumentError) bad" });
    l.append([c, x, e]);
    expect(l.rowAt(2)).toMatchObject({ type: "return", exception: true, label: "** (ArgumentError) bad" });
    // the inner call never returned: still running
    expect(l.activations.find((a) => a.row.entry === x).to).toBe(null);
  });

  it("spawn draws one arrow to the child (spawned is its other side), links one line", () => {
    const l = new SequenceLayout();
    const spawn = ev("spawn", A, { peer: B, data: "{KinoTraceTest.SequenceSample, :\"-pong/0-fun-0-\", []}", spawn_mfa: "anonymous fn/0 in KinoTraceTest.SequenceSample.pong/0" });
    const linked = ev("getting_linked", B, { peer: A });
    const unlink = ev("unlink", A, { peer: B });
    l.append([
      spawn,
      ev("spawned", B, { peer: A, data: "{M, :f, []}", pair: spawn.id }),
      linked,
      ev("link", A, { peer: B, pair: linked.id }),
      unlink,
      ev("getting_unlinked", B, { peer: A, pair: unlink.id }),
    ]);
    const rows = l.rowsIn(l.start, l.end);
    expect(rows.map((r) => [r.type, r.from, r.to, r.label])).toEqual([
      ["spawn", 0, 1, "spawn anonymous fn/0 in KinoTraceTest.SequenceSample.pong/0"],
      ["link", 0, 1, "link"],
      ["link", 0, 1, "unlink"],
    ]);
    expect(l.lanes[1].firstSeq).toBe(0);
  });

  it("a link seen only from the linked side still shows, from the linker", () => {
    const l = new SequenceLayout();
    l.append([ev("getting_linked", B, { peer: A })]);
    expect(l.rowAt(0)).toMatchObject({ type: "link", from: l.laneByKey.get(A).index, to: l.laneByKey.get(B).index });
  });

  it("exit ends the lifeline and closes running calls; register names the lane", () => {
    const l = new SequenceLayout();
    // a registered name reads as Elixir writes it, as the server names processes (issue 39 item 7)
    const c = ev("call", A, { call: "M.loop()" });
    l.append([c, ev("register", A, { data: ":pong" }), ev("exit", A, { data: "{:shutdown, :done}" }), ev("exit", B, { data: ":killed" })]);
    expect(l.lanes[0]).toMatchObject({ name: ":pong", exitSeq: 2 });
    expect(l.rowAt(1)).toMatchObject({ type: "note", label: "register :pong" });
    expect(l.rowAt(2)).toMatchObject({ type: "exit", normal: true });
    expect(l.rowAt(3)).toMatchObject({ type: "exit", normal: false, label: ":killed" });
    expect(l.activations[0].to).toBe(2);
  });

  it("an after timeout (timeouts: true) is a note on its lane, labelled as one", () => {
    const l = new SequenceLayout();
    l.append([recv(A, ":go"), ev("timeout", A)]);
    expect(l.rowAt(1)).toMatchObject({ type: "note", from: 0, to: 0, label: "after timeout" });
  });

  it("names lanes from the events' names and peer names; remote lanes keep their node", () => {
    const l = new SequenceLayout();
    l.append([send(A, B, ":x", { name: "ping", peer_name: "pong" }), recv(C, ":y", { remote: true, node: "b@h" })]);
    expect(l.lanes.map((x) => [x.name, x.remote, x.node])).toEqual([
      ["ping", false, "a@h"],
      ["pong", false, "a@h"],
      [null, true, "b@h"],
    ]);
  });

  it("send_to_non_existing is a lost arrow and waits for no receive", () => {
    const l = new SequenceLayout();
    l.append([ev("send_to_non_existing", A, { peer: B, data: ":hello" }), recv(B, ":hello")]);
    expect(l.rowAt(0)).toMatchObject({ type: "message", lost: true, receive: null });
    expect(l.rowAt(1).type).toBe("found");
  });

  it("keeps at most maxRows rows, the newest; the pair of an evicted row is drawn on its own", () => {
    const l = new SequenceLayout({ maxRows: 100 });
    const events = [];
    for (let i = 0; i < 300; i++) events.push(send(A, B, `{:n, ${i}}`));
    l.append(events);
    expect(l.end - l.start).toBe(100);
    expect(l.start).toBe(200);
    expect(l.rowAt(200).label).toBe("{:n, 200}");
    expect(l.rowAt(199)).toBe(undefined);
    expect(l.rowById.size).toBe(100);
    l.append([recvOf(events[5])]); // its send is gone: a found message
    expect(l.rowAt(l.end - 1).type).toBe("found");
    expect(l.end - l.start).toBe(100);
  });

  it("ignores return_to and unknown kinds", () => {
    const l = new SequenceLayout();
    l.append([ev("return_to", A, { mfa: "M.f/0" }), ev("something", A)]);
    expect(l.end).toBe(0);
  });
});

describe("geometry", () => {
  it("rowsInView: the rows at least partly below the sticky lane header, no margin", () => {
    const l = new SequenceLayout();
    for (let i = 0; i < 100; i++) l.add(send(A, B, `${i}`));
    const g = GEOMETRY;
    // at the top: the header covers nothing of the rows
    expect(rowsInView(l, { scrollTop: 0, height: g.headerHeight + 3 * g.rowHeight })).toEqual({ first: 0, last: 3 });
    // half of row 10 under the header, half of row 13 at the bottom
    const view = { scrollTop: 10.5 * g.rowHeight, height: g.headerHeight + 3 * g.rowHeight };
    expect(rowsInView(l, view)).toEqual({ first: 10, last: 14 });
    // past the end, and after older rows were evicted
    expect(rowsInView(l, { scrollTop: 200 * g.rowHeight, height: 400 })).toEqual({ first: 100, last: 100 });
    const small = new SequenceLayout({ maxRows: 10 });
    for (let i = 0; i < 25; i++) small.append([send(A, B, `${i}`)]);
    expect(rowsInView(small, { scrollTop: 0, height: g.headerHeight + 2 * g.rowHeight })).toEqual({ first: 15, last: 17 });
  });

  it("rowEventIds: a row's event, its send's receive, its call's return", () => {
    const l = new SequenceLayout();
    const s1 = send(A, B, ":ping");
    const r1 = recvOf(s1);
    const call = ev("call", B, { mfa: "M.f/0", call: "M.f()" });
    const ret = ev("return", B, { mfa: "M.f/0", result: ":ok", call_id: call.id });
    const lonely = send(A, C, ":lost");
    l.append([s1, r1, call, ret, lonely]);
    expect(l.rowsIn(l.start, l.end).map(rowEventIds)).toEqual([[s1.id, r1.id], [call.id, ret.id], [lonely.id]]);
  });

  it("visibleWindow keeps to the rows and lanes in view, plus a margin", () => {
    const l = new SequenceLayout();
    for (let i = 0; i < 1000; i++) l.add(send(A, B, `${i}`));
    for (let i = 0; i < 30; i++) l.add(send(`#PID<0.${200 + i}.0>`, A, ":x"));
    const g = GEOMETRY;
    const w = visibleWindow(l, { scrollTop: g.headerHeight + 500 * g.rowHeight, scrollLeft: 0, height: 420, width: 900 });
    expect(w.first).toBe(500 - g.overscan);
    expect(w.last).toBe(500 + Math.ceil(420 / g.rowHeight) + g.overscan);
    expect(w.firstLane).toBe(0);
    expect(w.lastLane).toBeLessThan(10);
    const right = visibleWindow(l, { scrollTop: 0, scrollLeft: g.gutter + 20 * g.laneWidth, height: 420, width: 900 });
    expect(right.firstLane).toBe(19);
    expect(right.first).toBe(0);
  });

  it("lanes are a fixed width apart, whatever their number", () => {
    expect(laneX(1) - laneX(0)).toBe(GEOMETRY.laneWidth);
    expect(laneX(40) - laneX(39)).toBe(GEOMETRY.laneWidth);
  });

  it("labels are cut to fit", () => {
    expect(fit("abcdef", 100)).toBe("abcdef");
    expect(fit("a".repeat(40), 72)).toBe("a".repeat(9) + "…");
  });

  it("detailEntry gives the log-style entry: a call with its return, a send with its receive", () => {
    const l = new SequenceLayout();
    const c = ev("call", A, { call: "M.f()" });
    const r = ev("return", A, { call_id: c.id, result: ":ok", duration: 500 });
    const s = send(A, B, ":m");
    const rv = recvOf(s);
    l.append([c, r, s, rv]);
    expect(detailEntry(l.rowAt(0))).toMatchObject({ id: c.id, returnId: r.id, result: ":ok", duration: 500 });
    expect(detailEntry(l.rowAt(1))).toMatchObject({ id: s.id, receiveId: rv.id, received: rv.time });
  });
});

describe("SequenceView", () => {
  it("draws only the rows in view, arrows between the right lanes, and selects on click", () => {
    const parent = document.createElement("div");
    document.body.appendChild(parent);
    const l = new SequenceLayout();
    const selected = [];
    const view = new SequenceView(parent, { layout: l, onSelect: (row) => selected.push(row) });
    const events = [];
    for (let i = 0; i < 500; i++) {
      const [ping, pong] = [send(A, B, `{:ping, ${i}}`), send(B, A, `{:pong, ${i}}`)];
      events.push(ping, recvOf(ping), pong, recvOf(pong));
    }
    l.append(events);
    view.render();
    const items = parent.querySelectorAll(".kt-seq-item");
    expect(l.end - l.start).toBe(1000);
    expect(items.length).toBeGreaterThan(5);
    expect(items.length).toBeLessThan(60); // virtualised
    expect(parent.querySelectorAll(".kt-seq-lane").length).toBe(2);
    expect(parseInt(view.spacer.style.height)).toBe(GEOMETRY.headerHeight + 1000 * GEOMETRY.rowHeight + 16);
    const item = [...items].find((g) => g.dataset.type === "message");
    const line = item.querySelector("line");
    const seq = Number(item.dataset.seq);
    const row = l.rowAt(seq);
    const [x1, x2] = [Number(line.getAttribute("x1")), Number(line.getAttribute("x2"))];
    expect(Math.sign(x2 - x1)).toBe(row.to > row.from ? 1 : -1);
    item.dispatchEvent(new MouseEvent("click", { bubbles: true }));
    expect(selected).toEqual([row]);
    expect(parent.querySelector(".kt-seq-item-selected").dataset.seq).toBe(String(seq));
  });

  it("draws each lane in its column: the header, the lifeline and the arrows of the busiest lane first", () => {
    const parent = document.createElement("div");
    document.body.appendChild(parent);
    const l = new SequenceLayout();
    const view = new SequenceView(parent, { layout: l });
    const ping = send(C, B, ":ping");
    l.append([ev("call", A, { call: "M.f()" }), ev("call", B, { call: "M.g()" }), ping, recvOf(ping), send(C, A, ":hi")]);
    view.render();
    const cells = [...parent.querySelectorAll(".kt-seq-lane")];
    const left = (pid) => parseInt(cells.find((c) => c.dataset.pid === pid).style.left);
    // C sent 2; A and B received 1 each, and keep their order of appearance
    expect([left(C), left(A), left(B)]).toEqual([0, 1, 2].map((c) => GEOMETRY.gutter + c * GEOMETRY.laneWidth));
    const message = [...parent.querySelectorAll(".kt-seq-item")].find((g) => g.dataset.type === "message");
    const line = message.querySelector("line");
    // C → B: from the first column to the third
    expect(Number(line.getAttribute("x1"))).toBeLessThan(laneX(0) + 10);
    expect(Number(line.getAttribute("x2"))).toBeGreaterThan(laneX(2) - 10);
    expect(Number(line.getAttribute("x2"))).toBeLessThan(laneX(2) + 1);
  });

  it("says how to get messages when there are none", () => {
    const parent = document.createElement("div");
    const view = new SequenceView(parent, { layout: new SequenceLayout() });
    view.render();
    expect(parent.querySelector(".kt-seq-empty").hidden).toBe(false);
    expect(view.scroller.hidden).toBe(true);
  });
});

import { shortCall } from "../src/sequence.js";

describe("shortCall", () => {
  it("keeps the module's last alias", () => {
    expect(shortCall("MyApp.Cache.fetch(:users, 1)")).toBe("Cache.fetch(:users, 1)");
    expect(shortCall("Enum.map([1], :f)")).toBe("Enum.map([1], :f)");
    expect(shortCall(":ets.insert(:t, {1, 2})")).toBe(":ets.insert(:t, {1, 2})");
    expect(shortCall("M.A.f(%{a: B.c()})")).toBe("A.f(%{a: B.c()})");
  });
});
