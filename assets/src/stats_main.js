// Entry point of the stats widget (Kino.Trace.StatsWidget), loaded by Livebook
// (Kino.JS): `init(ctx, data)` with the widget's handle_connect data (status, refresh
// interval, the first snapshot). The widget is hung on the output's element as
// `__kinoTraceStats` for the browser console and the tests.

import { StatsWidget } from "./stats_widget.js";
import { mount } from "./transport.js";

export const init = mount(StatsWidget, "__kinoTraceStats");
