// The widgets' one link to the server: the only module that calls `ctx`, Kino's JS API
// (Kino.JS.Live). The widgets get a Transport and never see `ctx`:
//
//   const server = new Transport(ctx);
//   server.on("status", ({ status }) => ...);   // what the server sends (broadcast_event)
//   server.push("pause");                        // a request (handle_event on the server)
//   server.root                                  // the element the widget draws into
//
// Payloads cross a JSON boundary both ways.

export class Transport {
  /** @param {object} ctx Kino's `ctx`: root, importCSS, handleEvent, pushEvent */
  constructor(ctx) {
    this.ctx = ctx;
    /** The output's element, where the widget draws. */
    this.root = ctx.root;
  }

  /** Loads a stylesheet shipped with the widget's bundle (relative to its main.js). */
  importCSS(url) {
    return this.ctx.importCSS(url);
  }

  /** Calls fn(payload) for every `event` the server sends. */
  on(event, fn) {
    this.ctx.handleEvent(event, fn);
    return this;
  }

  /**
   * Calls fn() when Livebook is about to evaluate a smart cell, to send edits not sent
   * yet (Kino's `ctx.handleSync`; absent outside smart cells).
   */
  onSync(fn) {
    if (this.ctx.handleSync) this.ctx.handleSync(fn);
    return this;
  }

  /** Sends `event` with `payload` (a JSON-able object) to the server. */
  push(event, payload = {}) {
    this.ctx.pushEvent(event, payload);
  }
}

/**
 * Kino.JS's `init(ctx, data)` for a widget class: loads `main.css`, builds the widget on a
 * Transport over `ctx` and hangs it on the output's element as `debugName` (for the
 * browser console and the browser tests).
 */
export function mount(Widget, debugName) {
  return async function init(ctx, data) {
    const server = new Transport(ctx);
    await server.importCSS("main.css");
    const widget = new Widget(server, data);
    server.root[debugName] = widget;
  };
}
