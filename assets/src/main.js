// Entry point loaded by Livebook (Kino.JS): `init(ctx, data)` with the data from the
// widget's handle_connect (patterns, status, counters, recent events). The widget is
// hung on the output's element as `__kinoTrace` for the browser console and the tests.

import { TraceWidget } from "./app.js";
import { mount } from "./transport.js";

export const init = mount(TraceWidget, "__kinoTrace");
