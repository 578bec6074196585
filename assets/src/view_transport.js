// The Transport of a recorder's snapshot shown in the usual tabs (app.js): a TraceWidget
// of the snapshot talks through it as through a Transport (transport.js), and its events
// travel as the server's "view" events for snapshot `id` (KinoTrace.Widget.Views), both
// ways:
//
//   push("get_term", { id: 3 })            ->  outer.push("view", { id, event: "get_term", payload: { id: 3 } })
//   "view" { id, event: "term", payload }  ->  receive(...)  ->  the handler of "term"

export class ViewTransport {
  /**
   * @param {Transport} outer the widget's Transport
   * @param {number} id the snapshot's id
   * @param {HTMLElement} root where the snapshot's widget draws
   */
  constructor(outer, id, root) {
    this.outer = outer;
    this.id = id;
    this.root = root;
    this.handlers = new Map();
  }

  /** The outer widget has loaded the stylesheets. */
  importCSS() {
    return Promise.resolve();
  }

  on(event, fn) {
    this.handlers.set(event, fn);
    return this;
  }

  onSync() {
    return this;
  }

  push(event, payload = {}) {
    this.outer.push("view", { id: this.id, event, payload });
  }

  /** Hands a "view" event to its handler when it is this view's; says whether it was. */
  receive({ id, event, payload }) {
    if (id !== this.id) return false;
    const fn = this.handlers.get(event);
    if (fn) fn(payload);
    return true;
  }
}
