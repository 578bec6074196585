// Entry point loaded by Livebook (Kino.JS): `init(ctx, data)` with the data from the
// widget's handle_connect (patterns, status, counters, recent events).

import { TraceWidget } from "./app.js";

export async function init(ctx, data) {
  await ctx.importCSS("main.css");
  const widget = new TraceWidget(ctx, data);
  // for debugging in the browser console and for the browser tests
  ctx.root.__kinoTrace = widget;
}
