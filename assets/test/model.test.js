import { describe, it, expect } from "vitest";
import { LogModel } from "../src/model.js";

let nextId = 1;
const call = (mfa, fields = {}) => ({
  id: nextId++,
  kind: "call",
  mfa,
  call: `${mfa.split("/")[0]}(1)`,
  pid: "#PID<0.1.0>",
  node: "a@h",
  depth: 0,
  time: 1_700_000_000_000_000,
  ...fields,
});
const ret = (c, fields = {}) => ({
  id: nextId++,
  kind: "return",
  mfa: c.mfa,
  call_id: c.id,
  result: ":ok",
  duration: 1000,
  pid: c.pid,
  depth: c.depth,
  ...fields,
});

describe("LogModel", () => {
  it("merges returns and exceptions into their calls", () => {
    const m = new LogModel();
    const a = call("M.a/1");
    const b = call("M.b/1", { depth: 1 });
    m.append([a, b]);
    m.append([ret(b, { result: "{:ok, 1}", duration: 500 }), { ...ret(a), kind: "exception", result: null, exception: "** (RuntimeError) x" }]);

    expect(m.size).toBe(2);
    expect(m.viewAt(0).exception).toBe("** (RuntimeError) x");
    expect(m.viewAt(1).result).toBe("{:ok, 1}");
    expect(m.viewAt(1).duration).toBe(500);
    expect(m.viewAt(1).returnId).toBe(b.id + 1);
  });

  it("keeps returns whose call it does not hold, and other events, as entries", () => {
    const m = new LogModel();
    m.append([{ id: 99, kind: "return", call_id: 42, mfa: "M.x/0", result: "1" }, { id: 100, kind: "send", data: ":hi", pid: "p" }]);
    expect(m.size).toBe(2);
  });

  it("holds at most maxEntries, dropping the oldest, and stays consistent", () => {
    const m = new LogModel({ maxEntries: 1000 });
    const calls = [];
    for (let i = 0; i < 5000; i++) calls.push(call("M.f/1"));
    for (let i = 0; i < calls.length; i += 100) m.append(calls.slice(i, i + 100));
    expect(m.size).toBe(1000);
    expect(m.viewAt(0).id).toBe(calls[4000].id);
    expect(m.viewAt(999).id).toBe(calls[4999].id);
    // a return for an evicted call becomes its own entry
    m.append([ret(calls[0])]);
    expect(m.size).toBe(1000);
    expect(m.viewAt(999).kind).toBe("return");
  });

  it("filters case-insensitively over who, call and outcome, and updates as rows arrive", () => {
    const m = new LogModel();
    const a = call("Repo.get/2", { call: "Repo.get(:users, 1)", name: "worker" });
    const b = call("Repo.get/2", { call: "Repo.get(:orders, 2)" });
    m.append([a, b]);
    m.setFilter("USERS");
    expect(m.viewLength).toBe(1);
    m.setFilter("worker");
    expect(m.viewLength).toBe(1);
    m.setFilter("not_found");
    expect(m.viewLength).toBe(0);
    // a return that makes an earlier call match puts it in place
    m.append([ret(b, { result: "{:error, :not_found}" })]);
    expect(m.viewLength).toBe(1);
    expect(m.viewAt(0).id).toBe(b.id);
    m.append([call("X.not_found/0", { call: "X.not_found()" })]);
    expect(m.viewLength).toBe(2);
    m.setFilter("");
    expect(m.viewLength).toBe(3);
  });

  it("filters over the caller and the file and line it called from", () => {
    const m = new LogModel();
    m.append([
      call("Repo.get/2", { call: "Repo.get(:users, 1)", caller: "MyApp.Users.show/1 at lib/my_app/users.ex:12" }),
      call("Repo.get/2", { call: "Repo.get(:users, 2)", caller: "MyApp.Users.list/0" }),
    ]);
    m.setFilter("users.ex:12");
    expect(m.viewLength).toBe(1);
    m.setFilter("myapp.users.");
    expect(m.viewLength).toBe(2);
  });

  it("counts per-function stats: calls, durations, exceptions", () => {
    const m = new LogModel();
    const a1 = call("M.a/1");
    const a2 = call("M.a/1");
    m.append([a1, a2, ret(a1, { duration: 100 }), { ...ret(a2, { duration: 300 }), kind: "exception", exception: "boom" }]);
    const [stats] = m.statsRows();
    expect(stats).toEqual({ mfa: "M.a/1", count: 2, total: 400, mean: 200, max: 300, exceptions: 1 });
  });

  // issue 25 item 5: a trace without returns does not know how long the calls took
  it("leaves the times of a function with no timed return unknown, not 0", () => {
    const m = new LogModel();
    m.append([call("M.a/1"), call("M.a/1")]);
    const [stats] = m.statsRows();
    expect(stats).toEqual({ mfa: "M.a/1", count: 2, total: null, mean: null, max: null, exceptions: 0 });
  });

  // issue 25 item 4: a compiler-made function keeps its raw name as its identity
  it("labels a stats row as the server labels the function", () => {
    const m = new LogModel();
    const raw = 'Enum."-sum/1-lists^foldl/2-0-"/2';
    const c = call(raw, { mfa_label: "anonymous fn/2 in Enum.sum/1" });
    m.append([c, ret(c, { mfa_label: c.mfa_label })]);
    expect(m.statsRows()).toEqual([
      { mfa: raw, label: "anonymous fn/2 in Enum.sum/1", count: 1, total: 1000, mean: 1000, max: 1000, exceptions: 0 },
    ]);
  });

  it("builds per-process call trees from depths", () => {
    const m = new LogModel();
    const p1 = "#PID<0.1.0>";
    const p2 = "#PID<0.2.0>";
    m.append([
      call("A.a/0", { pid: p1, depth: 0 }),
      call("B.b/0", { pid: p1, depth: 1 }),
      call("C.c/0", { pid: p2, depth: 0 }),
      call("D.d/0", { pid: p1, depth: 2 }),
      call("E.e/0", { pid: p1, depth: 1 }),
      call("F.f/0", { pid: p1, depth: 0 }),
    ]);
    const trees = m.callTrees();
    expect(trees.map((t) => t.pid)).toEqual([p1, p2]);
    const [a, f] = trees[0].roots;
    expect(a.entry.mfa).toBe("A.a/0");
    expect(a.children.map((n) => n.entry.mfa)).toEqual(["B.b/0", "E.e/0"]);
    expect(a.children[0].children[0].entry.mfa).toBe("D.d/0");
    expect(f.entry.mfa).toBe("F.f/0");
  });

  it("clear forgets everything", () => {
    const m = new LogModel();
    m.append([call("M.a/1")]);
    m.clear();
    expect([m.size, m.statsRows().length]).toEqual([0, 0]);
  });
});

describe("LogModel with message and process events", () => {
  it("they are entries of their own; stats and call trees ignore them", () => {
    const m = new LogModel();
    const c = call("M.a/1");
    m.append([
      c,
      { id: nextId++, kind: "send", pid: "#PID<0.1.0>", data: "{:ping, 1}", peer: "#PID<0.2.0>", depth: 0 },
      { id: nextId++, kind: "receive", pid: "#PID<0.2.0>", data: "{:ping, 1}", depth: 0 },
      { id: nextId++, kind: "return_to", pid: "#PID<0.1.0>", mfa: "M.a/1", depth: 0 },
      { id: nextId++, kind: "exit", pid: "#PID<0.2.0>", data: ":normal", depth: 0 },
      ret(c),
    ]);
    expect(m.size).toBe(5);
    expect(m.messages).toBe(3);
    expect(m.statsRows()).toEqual([{ mfa: "M.a/1", count: 1, total: 1000, mean: 1000, max: 1000, exceptions: 0 }]);
    const trees = m.callTrees();
    expect(trees.length).toBe(1);
    expect(trees[0].roots.map((n) => n.entry.mfa)).toEqual(["M.a/1"]);
  });

  it("the filter finds them by kind, message and peer", () => {
    const m = new LogModel();
    m.append([
      { id: nextId++, kind: "send", pid: "#PID<0.1.0>", data: "{:ping, 1}", peer: "#PID<0.2.0>", peer_name: "pong", depth: 0 },
      { id: nextId++, kind: "exit", pid: "#PID<0.2.0>", data: ":normal", depth: 0 },
      call("M.a/1"),
    ]);
    m.setFilter("send");
    expect(m.viewLength).toBe(1);
    m.setFilter(":ping");
    expect(m.viewLength).toBe(1);
    m.setFilter("pong");
    expect(m.viewAt(0).kind).toBe("send");
    m.setFilter("exit :normal");
    expect(m.viewLength).toBe(1);
  });
});
