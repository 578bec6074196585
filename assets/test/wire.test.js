// @vitest-environment jsdom
// The widget against the wire's one schema (assets/wire.schema.json, which the Elixir
// tests check every payload the server makes against): the widget handles exactly the
// events the schema lists, reads no field the schema does not declare, and reads every
// field of the connect payload and of the "events" and "status" events (a field the
// server sends and nobody reads is drift too).
//
// Payloads are made from the schema (a value of each declared field's type, with a few
// meaningful values on top, themselves checked to be declared) and handed to the widget
// behind proxies that record each field read.
import { describe, it, expect } from "vitest";
import schema from "../wire.schema.json";
import { init } from "../src/main.js";

const resolve = (def) => (def && def.$ref ? resolve(schema.$defs[def.$ref.replace("#/$defs/", "")]) : def);

// The declared fields of an object schema (of every form of an anyOf).
function fields(def) {
  def = resolve(def);
  if (def.anyOf) return Object.assign({}, ...def.anyOf.map(fields));
  return def.properties || {};
}

// A value of the schema's type: each declared field of an object, `overrides` on top.
function sample(def, overrides = {}, path = "") {
  def = resolve(def);
  if (def.anyOf) def = resolve(def.anyOf[0]);
  const type = [].concat(def.type || "object").find((t) => t !== "null") || "null";
  switch (type) {
    case "object": {
      const declared = fields(def);
      for (const key of Object.keys(overrides)) {
        if (!(key in declared) && !def.additionalProperties) throw new Error(`sample: ${path}.${key} is not in the schema`);
      }
      const out = {};
      for (const [key, field] of Object.entries(declared)) out[key] = key in overrides ? overrides[key] : sample(field, {}, `${path}.${key}`);
      return out;
    }
    case "array":
      return [];
    case "string":
      return def.enum ? def.enum[0] : "x";
    case "integer":
    case "number":
      return Math.max(def.minimum ?? 1, 1);
    case "boolean":
      return false;
    default:
      return null;
  }
}

// `value` behind proxies, as deep as the schema describes it: reads of declared fields go
// to `reads` (as paths), reads of fields neither declared nor set by the widget itself
// to `undeclared`.
function watched(value, def, path, log) {
  def = resolve(def);
  if (Array.isArray(value)) return value.map((item, i) => watched(item, def.items || {}, `${path}[]`, log));
  if (value === null || typeof value !== "object") return value;
  const declared = fields(def);
  const open = typeof def.additionalProperties === "object";
  const inner = {};
  for (const [key, field] of Object.entries(value)) inner[key] = key in declared ? watched(field, declared[key], `${path}.${key}`, log) : field;
  return new Proxy(inner, {
    get(target, key, receiver) {
      if (typeof key === "string" && !(key in Object.prototype)) {
        if (key in declared) log.reads.add(`${path}.${key}`);
        else if (!open && !Object.hasOwn(target, key)) log.undeclared.add(`${path}.${key}`);
      }
      return Reflect.get(target, key, receiver);
    },
  });
}

const pid = "#PID<0.10.0>";
const peer = "#PID<0.11.0>";
const row = (over) => sample(schema.$defs.row, { node: "a@h", pid, time: 1_700_000_000_000_000, depth: 0, ...over });
const rows = () => [
  row({ id: 1, kind: "call", mfa: "M.f/1", call: "M.f(1)" }),
  row({ id: 2, kind: "return", mfa: "M.f/1", result: ":ok", call_id: 1, duration: 10 }),
  row({ id: 3, kind: "send", data: ":ping", peer, peer_name: "pong" }),
  row({ id: 4, kind: "receive", pid: peer, data: ":ping" }),
  row({ id: 5, kind: "exception", mfa: "M.f/1", exception: "** (RuntimeError) boom", call_id: 9 }),
  row({ id: 6, kind: "exit", data: ":normal" }),
];

async function open(log) {
  const handlers = {};
  const root = document.createElement("div");
  document.body.replaceChildren(root);
  const ctx = { root, importCSS: async () => {}, handleEvent: (e, f) => (handlers[e] = f), pushEvent: () => {} };
  const connect = sample(schema.connect, { status: "running", patterns: ["M.f/1"], events: rows(), max_entries: 1000, sequence_rows: 500 });
  await init(ctx, watched(connect, schema.connect, "connect", log));
  const emit = (event, over = {}) => handlers[event](watched(sample(schema.events[event], over), schema.events[event], event, log));
  return { handlers, emit, root, widget: root.__kinoTrace };
}

describe("the wire (assets/wire.schema.json)", () => {
  it("the widget handles exactly the events the schema lists", async () => {
    const log = { reads: new Set(), undeclared: new Set() };
    const { handlers } = await open(log);
    expect(Object.keys(handlers).sort()).toEqual(Object.keys(schema.events).sort());
  });

  it("the widget reads only declared fields, and every field of connect, events and status", async () => {
    const log = { reads: new Set(), undeclared: new Set() };
    const w = await open(log);
    expect(w.widget.model.maxEntries).toBe(1000);
    expect(w.widget.sequence.maxRows).toBe(500);

    w.emit("events", { events: rows().map((r) => ({ ...r, id: r.id + 100, call_id: r.call_id && r.call_id + 100 })) });
    w.emit("counters", { events: 12, fallback: [{ node: "a@h", why: "no NIF" }], dropped: { rate: 1 } });
    w.emit("patterns", { patterns: ["M.f/1"], results: [{ input: "M.f/1", ok: true, error: null, warning: null }] });
    w.emit("completions", { seq: 1, prefix: "f", items: [{ label: "f/1", insert: "f/1", kind: "function", detail: "M.f/1" }] });
    w.root.querySelector(".kt-vlist .kt-row").click(); // the details ask for the terms
    w.emit("term", { id: 1, kind: "call", mfa: "M.f/1", args: ["1"], cut: false });
    w.root.querySelector('[data-tab="sequence"]').click();
    w.widget.sequenceView.render();
    w.emit("mermaid", { source: "sequenceDiagram\n", events: 2 });
    w.emit("status", { status: "stopped" });
    w.emit("clear");

    expect([...log.undeclared].sort()).toEqual([]);
    const unread = (name) => Object.keys(fields(name === "connect" ? schema.connect : schema.events[name])).map((k) => `${name}.${k}`).filter((p) => !log.reads.has(p));
    expect(unread("connect")).toEqual([]);
    expect(unread("events")).toEqual([]);
    expect(unread("status")).toEqual([]);
  });

  it("a field the schema does not declare is caught", () => {
    const log = { reads: new Set(), undeclared: new Set() };
    const connect = watched(sample(schema.connect), schema.connect, "connect", log);
    void connect.keep;
    void connect.max_entries;
    expect([...log.undeclared]).toEqual(["connect.keep"]);
    expect(log.reads.has("connect.max_entries")).toBe(true);
    expect(() => sample(schema.connect, { keep: 1 })).toThrow(/connect\.keep|\.keep is not in the schema/);
  });
});
