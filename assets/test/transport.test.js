// @vitest-environment jsdom
import { describe, it, expect } from "vitest";
import { Transport, mount } from "../src/transport.js";

// Kino's ctx as Livebook hands it over, recording what is asked of it.
function recordingCtx() {
  const calls = [];
  const handlers = {};
  return {
    calls,
    handlers,
    root: document.createElement("div"),
    importCSS: async (url) => void calls.push(["importCSS", url]),
    handleEvent: (event, fn) => (calls.push(["handleEvent", event]), (handlers[event] = fn)),
    pushEvent: (event, payload) => calls.push(["pushEvent", event, payload]),
  };
}

describe("Transport", () => {
  it("registers handlers for server events and sends requests, {} when there is no payload", () => {
    const ctx = recordingCtx();
    const server = new Transport(ctx);
    const got = [];
    expect(server.on("status", (p) => got.push(p))).toBe(server);
    ctx.handlers.status({ status: "paused" });
    server.push("pause");
    server.push("get_term", { id: 4 });
    expect(got).toEqual([{ status: "paused" }]);
    expect(ctx.calls).toEqual([
      ["handleEvent", "status"],
      ["pushEvent", "pause", {}],
      ["pushEvent", "get_term", { id: 4 }],
    ]);
    expect(server.root).toBe(ctx.root);
  });

  it("onSync: hands Livebook's pre-evaluation sync to the widget; nothing without handleSync", () => {
    const ctx = recordingCtx();
    let synced = 0;
    ctx.handleSync = (fn) => (ctx.sync = fn);
    expect(new Transport(ctx).onSync(() => synced++)).toBeInstanceOf(Transport);
    ctx.sync();
    expect(synced).toBe(1);
    // a plain Kino.JS.Live output has no handleSync
    expect(() => new Transport(recordingCtx()).onSync(() => synced++)).not.toThrow();
  });

  it("mount: Kino's init loads main.css, builds the widget on a Transport and hangs it on the root", async () => {
    class Widget {
      constructor(server, data) {
        this.server = server;
        this.data = data;
      }
    }
    const ctx = recordingCtx();
    const init = mount(Widget, "__test");
    await init(ctx, { a: 1 });
    const widget = ctx.root.__test;
    expect(widget).toBeInstanceOf(Widget);
    expect(widget.server).toBeInstanceOf(Transport);
    expect(widget.data).toEqual({ a: 1 });
    expect(ctx.calls).toEqual([["importCSS", "main.css"]]);
  });
});
