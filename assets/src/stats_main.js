// Entry point of the stats widget (Kino.Trace.StatsWidget), loaded by Livebook
// (Kino.JS): `init(ctx, data)` with the widget's handle_connect data (status, refresh
// interval, the first snapshot).

import { StatsWidget } from "./stats_widget.js";

export async function init(ctx, data) {
  await ctx.importCSS("main.css");
  const widget = new StatsWidget(ctx, data);
  // for debugging in the browser console and for the browser tests
  ctx.root.__kinoTraceStats = widget;
}
