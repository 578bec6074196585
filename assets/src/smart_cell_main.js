// Entry point of the "Trace" smart cell (Kino.Trace.SmartCell), loaded by Livebook
// (Kino.JS): `init(ctx, data)` with the cell's handle_connect data (the form, the modes,
// the server's check of the form). The form is hung on the output's element as
// `__kinoTraceCell` for the browser console and the tests.

import { TraceCellForm } from "./smart_cell.js";
import { mount } from "./transport.js";

export const init = mount(TraceCellForm, "__kinoTraceCell");
