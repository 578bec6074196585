// A stand-in for Livebook's side of a Kino.JS.Live output: it implements the `ctx`
// object Kino documents (root, importCSS, importJS, handleEvent, pushEvent, handleSync,
// selectSecret), records what the widget pushes, and lets the test deliver server events.
// Events sent before the widget registers a handler are buffered, as Livebook does.

// The widget's bundle: /build/ (Kino.Trace.Widget) unless start() is told another, such
// as /stats-build/ (Kino.Trace.StatsWidget).
let ASSETS = new URL("/build/", window.location.href);

const harness = {
  pushed: [],
  handlers: new Map(),
  pending: new Map(),
  responders: new Map(),

  /** Delivers a server event (broadcast_event / send_event) to the widget. */
  emit(event, payload) {
    const handler = this.handlers.get(event);
    if (handler) handler(payload);
    else {
      if (!this.pending.has(event)) this.pending.set(event, []);
      this.pending.get(event).push(payload);
    }
  },

  /** Answers pushes of `event` with fn(payload) -> [[event, payload], ...]. */
  respond(event, fn) {
    this.responders.set(event, fn);
  },

  pushedEvents(name) {
    return this.pushed.filter((p) => p.event === name);
  },

  async start(data, bundle = "build") {
    ASSETS = new URL(`/${bundle}/`, window.location.href);
    const root = document.getElementById("output");
    root.replaceChildren();
    const ctx = {
      root,
      importCSS(url) {
        return new Promise((resolve, reject) => {
          const link = document.createElement("link");
          link.rel = "stylesheet";
          link.href = new URL(url, ASSETS).href;
          link.onload = resolve;
          link.onerror = reject;
          document.head.appendChild(link);
        });
      },
      importJS(url) {
        return new Promise((resolve, reject) => {
          const script = document.createElement("script");
          script.src = new URL(url, ASSETS).href;
          script.onload = resolve;
          script.onerror = reject;
          document.head.appendChild(script);
        });
      },
      handleEvent(event, callback) {
        harness.handlers.set(event, callback);
        for (const payload of harness.pending.get(event) || []) callback(payload);
        harness.pending.delete(event);
      },
      pushEvent(event, payload) {
        // payloads cross a JSON boundary in Livebook
        const copy = JSON.parse(JSON.stringify(payload ?? null));
        harness.pushed.push({ event, payload: copy });
        const responder = harness.responders.get(event);
        if (responder) {
          for (const [name, reply] of responder(copy) || []) setTimeout(() => harness.emit(name, reply), 0);
        }
      },
      // Livebook calls it before evaluating a smart cell; tests call harness.sync()
      handleSync(callback) {
        harness.sync = callback;
      },
      selectSecret(_callback, _preselect) {},
    };
    const module = await import(new URL("main.js", ASSETS).href);
    await module.init(ctx, JSON.parse(JSON.stringify(data)));
    return true;
  },
};

window.harness = harness;
window.harnessReady = true;
