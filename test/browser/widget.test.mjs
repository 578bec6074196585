// Browser test of the trace widget in real headless Chromium.
//
//   node test/browser/widget.test.mjs PAYLOADS.json
//
// PAYLOADS.json is written by test/kino/trace/widget/browser_test.exs from a real trace
// (connect payload, "events" pushes, a pattern edit's reply, full terms). This script
// serves the built widget (lib/assets/trace/build) and harness.html, which implements
// Kino's JS ctx API, then checks the widget's behaviour, prints a benchmark figure and
// saves a screenshot. Exits 0 when every check passes.

import { mkdirSync } from "node:fs";
import path from "node:path";
import { root, assert, openWidget as openHarness, emit, setup } from "./support.mjs";

// The committed build under /build/, the harness page from here (see support.mjs).
const { fixture, base, browser, check, errors: pageErrors, external, finish } = await setup("widget.test.mjs");
const openWidget = (data, opts = {}) => openHarness(browser, base, data, { ...opts, errors: pageErrors, external });

const modelSize = (page) => page.evaluate(() => document.getElementById("output").__kinoTrace.model.size);
const nextFrame = (page) => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
const rowTexts = (page) =>
  page.$$eval(".kt-vlist .kt-row", (rows) =>
    rows.filter((r) => r.style.display !== "none").map((r) => r.querySelector(".kt-c-call").textContent)
  );

const batches = fixture.batches;
const allRows = batches.flatMap((b) => b.events);
const callRows = allRows.filter((r) => r.kind === "call");
const lastCounters = batches[batches.length - 1].counters;
console.log(`fixture: ${batches.length} pushes, ${allRows.length} events from a real trace`);
assert(callRows.length > 0, "the fixture has no calls");

async function feedAll(page) {
  for (const batch of batches) await emit(page, "events", batch);
  await nextFrame(page);
}

console.log("widget in Chromium:");
const page = await openWidget(fixture.connect);

await check("starts from the connect payload: patterns prefilled, status running", async () => {
  const text = await page.inputValue(".kt-editor-input");
  for (const p of fixture.connect.patterns) assert(text.includes(p), `textarea lacks ${p}: ${text}`);
  assert((await page.textContent(".kt-status")) === "Running", "status is not Running");
});

await check("rows appear: calls merged with their returns, indented by depth", async () => {
  await feedAll(page);
  const size = await modelSize(page);
  const orphanReturns = allRows.filter(
    (r) => (r.kind === "return" || r.kind === "exception") && !callRows.some((c) => c.id === r.call_id)
  ).length;
  assert(size === callRows.length + orphanReturns, `model holds ${size}, expected ${callRows.length + orphanReturns}`);
  const texts = await rowTexts(page);
  assert(texts.some((t) => t.startsWith("SampleApp.Cache.fetch(")), `no fetch row among ${texts.slice(0, 5)}`);
  const nested = await page.$$eval(".kt-vlist .kt-row", (rows) =>
    rows.some((r) => r.querySelector(".kt-c-call").textContent.startsWith("SampleApp.Repo.get(") && parseInt(r.querySelector(".kt-c-call").style.paddingLeft) > 0)
  );
  assert(nested, "Repo.get rows are not indented under fetch");
  const outcomes = await page.$$eval(".kt-vlist .kt-row .kt-c-out", (els) => els.map((e) => e.textContent));
  assert(outcomes.some((o) => o.startsWith("-> {:ok, %{")), "no return value shown");
  const events = await page.textContent('[data-counter="events"]');
  assert(events.includes(String(lastCounters.events).slice(0, 1)), `events counter shows ${events}`);
});

await check("exceptions show as such", async () => {
  await page.fill(".kt-filter", "ArgumentError");
  await nextFrame(page);
  const rows = await page.$$eval(".kt-vlist .kt-row", (rows) =>
    rows.filter((r) => r.style.display !== "none").map((r) => [r.classList.contains("kt-row-exception"), r.querySelector(".kt-c-out").textContent])
  );
  assert(rows.length > 0, "no row matches ArgumentError");
  assert(rows.every(([exception, out]) => exception && out.includes("ArgumentError")), JSON.stringify(rows));
  await page.fill(".kt-filter", "");
});

await check("an Erlang error reads by its Elixir name in the row and the details, its class and reason below (issue 39 item 9)", async () => {
  await page.evaluate((terms) => {
    window.harness.respond("get_term", ({ id }) => [["term", terms[String(id)] || { id, error: "unknown" }]]);
  }, fixture.terms);
  await page.fill(".kt-filter", "FunctionClauseError");
  await nextFrame(page);
  const out = await page.textContent(".kt-vlist .kt-row >> nth=0 >> .kt-c-out");
  assert(out.includes("FunctionClauseError"), `the row reads ${out}`);
  await page.click(".kt-vlist .kt-row >> nth=0");
  await page.waitForSelector(".kt-detail:not([hidden]) .kt-exception-raw", { timeout: 5000 }).catch(() => null);
  const raised = await page.textContent(".kt-detail .kt-exception");
  assert(raised.startsWith("** (FunctionClauseError)"), `the details say Raised ${raised}`);
  const raw = await page.$eval(".kt-detail .kt-exception-raw", (e) => e.textContent).catch(() => null);
  assert(raw === "{:error, :function_clause}", `the class and reason read ${raw}`);
  await page.click(".kt-close");
  await page.fill(".kt-filter", "");
});

await check("filter narrows the log and clearing it restores all rows", async () => {
  const total = await modelSize(page);
  await page.fill(".kt-filter", ":orders");
  await nextFrame(page);
  const texts = await rowTexts(page);
  assert(texts.length > 0, "nothing matches :orders");
  assert(texts.every((t) => t.includes(":orders")), `non-matching rows shown: ${texts.filter((t) => !t.includes(":orders"))}`);
  const label = await page.textContent('[data-tab="log"] .kt-tab-count');
  assert(label.includes(" of "), `log tab count does not say "x of y": ${label}`);
  await page.fill(".kt-filter", "");
  await nextFrame(page);
  const view = await page.evaluate(() => document.getElementById("output").__kinoTrace.model.viewLength);
  assert(view === total, `after clearing the filter ${view} of ${total} shown`);
});

await check("clicking a row asks for its full terms and shows them", async () => {
  const target = callRows.find((r) => r.call.startsWith("SampleApp.Cache.fetch(:users"));
  await page.evaluate((terms) => {
    window.harness.respond("get_term", ({ id }) => [["term", terms[String(id)] || { id, error: "unknown" }]]);
  }, fixture.terms);
  await page.fill(".kt-filter", target.call);
  await nextFrame(page);
  await page.click(".kt-vlist .kt-row >> nth=0");
  const pushed = await page.evaluate(() => window.harness.pushedEvents("get_term").map((p) => p.payload.id));
  assert(pushed.includes(target.id), `get_term not pushed for ${target.id}: ${pushed}`);
  await page.waitForSelector(".kt-detail:not([hidden]) .kt-term");
  const detail = await page.textContent(".kt-detail");
  assert(detail.includes("Argument 1") && detail.includes(":users"), `detail lacks the arguments: ${detail}`);
  assert(detail.includes("Returned"), `detail lacks the return: ${detail}`);
  await page.click(".kt-close");
  await page.fill(".kt-filter", "");
});

await check("pattern edit pushes set_patterns and marks the bad line inline", async () => {
  await page.evaluate((reply) => window.harness.respond("set_patterns", () => [["patterns", reply]]), fixture.pattern_reply);
  // a blank line and a comment in between: line numbers must still be right
  const text = [fixture.pattern_lines[0], "", "# comment", ...fixture.pattern_lines.slice(1)].join("\n");
  await page.fill(".kt-editor-input", text);
  await page.click('[data-action="apply-patterns"]');
  const pushed = await page.evaluate(() => window.harness.pushedEvents("set_patterns").at(-1).payload);
  assert(JSON.stringify(pushed.patterns) === JSON.stringify(fixture.pattern_lines), `pushed ${JSON.stringify(pushed)}`);
  await page.waitForSelector(".kt-line-error");
  const badIndex = fixture.pattern_reply.results.findIndex((r) => !r.ok);
  const expectedLine = badIndex === 0 ? 1 : badIndex + 3; // two extra lines after the first
  const marked = await page.$$eval(".kt-editor-line", (lines) => lines.map((l, i) => [i + 1, l.classList.contains("kt-line-error")]).filter(([, e]) => e).map(([i]) => i));
  assert(JSON.stringify(marked) === JSON.stringify([expectedLine]), `marked lines ${marked}, expected ${expectedLine}`);
  const message = await page.textContent(".kt-editor-messages .kt-error");
  assert(message.includes(`line ${expectedLine}`) && message.includes(fixture.pattern_reply.results[badIndex].error.slice(0, 20)), `message: ${message}`);
});

await check("pause freezes the view (the trace goes on: nothing is pushed); resume shows what was held", async () => {
  const before = await modelSize(page);
  const pushes = await page.evaluate(() => window.harness.pushed.length);
  await page.click('[data-action="pause"]');
  assert((await page.evaluate(() => window.harness.pushed.length)) === pushes, "pause pushed something");
  const extra = callRows.slice(0, 5).map((r, i) => ({ ...r, id: 10_000_000 + i }));
  await emit(page, "events", { events: extra, counters: lastCounters });
  await nextFrame(page);
  assert((await modelSize(page)) === before, "rows were appended while paused");
  assert((await page.textContent(".kt-status")) === "View paused", "status is not View paused");
  await page.click('[data-action="resume"]');
  assert((await modelSize(page)) === before + 5, "held rows not appended on resume");
  assert((await page.textContent(".kt-status")) === "Running", "status is not Running");
});

await check("the header counts processes the stack guard took returns from", async () => {
  assert((await page.$('[data-counter="stack-guarded"]')) === null, "shown while none is guarded");
  await emit(page, "counters", { ...lastCounters, stack_guarded: 2 });
  const text = await page.textContent('[data-counter="stack-guarded"]');
  assert(text === "2 processes without returns", `stack guard counter shows ${text}`);
  await emit(page, "counters", lastCounters);
});

await check("stats tab: per-function counts, sortable", async () => {
  await page.click('[data-tab="stats"]');
  const rows = await page.$$eval(".kt-stats tbody tr", (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  const fetch = rows.find((r) => r[0] === "SampleApp.Cache.fetch/2");
  const isFetch = (r) => r.mfa === "SampleApp.Cache.fetch/2";
  // the pause check added copies of the first 5 calls
  const expected = callRows.filter(isFetch).length + callRows.slice(0, 5).filter(isFetch).length;
  assert(fetch && Number(fetch[1]) === expected, `fetch count ${fetch && fetch[1]}, expected ${expected}`);
  const exceptions = rows.find((r) => r[0] === "SampleApp.Repo.get/2");
  // (found by its header: the latency columns come before it)
  const column = (await page.$$eval(".kt-stats th", (ths) => ths.map((th) => th.dataset.key))).indexOf("exceptions");
  assert(exceptions && Number(exceptions[column]) > 0, "no exceptions counted for Repo.get/2");
  await page.click('.kt-stats th[data-key="mfa"]');
  const names = await page.$$eval(".kt-stats tbody tr td:first-child", (tds) => tds.map((td) => td.textContent));
  assert(JSON.stringify(names) === JSON.stringify([...names].sort()), `not sorted by name: ${names}`);
});

await check("calls tab: per-process trees with nested calls", async () => {
  await page.click('[data-tab="calls"]');
  const processes = await page.$$eval(".kt-tree-process", (els) => els.length);
  const pids = new Set(callRows.map((r) => r.pid));
  assert(processes === pids.size, `${processes} process trees for ${pids.size} pids`);
  const nested = await page.$$eval(".kt-tree-process[open] .kt-tree-list .kt-tree-list .kt-call", (els) => els.map((e) => e.textContent));
  assert(nested.some((t) => t.startsWith("SampleApp.Repo.get(")), "Repo.get is not nested under a fetch");
  await page.click('[data-tab="log"]');
});

await check("export: JSON holds the events, text has one line per entry", async () => {
  const exported = await page.evaluate(() => {
    const w = document.getElementById("output").__kinoTrace;
    return { json: w.exportData(), text: w.exportText() };
  });
  assert(exported.json.events.length === (await modelSize(page)), "JSON export lacks events");
  assert(exported.text.split("\n").length === exported.json.events.length, "text export line count");
  const download = page.waitForEvent("download");
  await page.click('[data-action="export"]');
  await page.click('[data-action="download-json"]');
  const file = await download;
  assert(file.suggestedFilename().endsWith(".json"), "no JSON download");
});

await check("clear and stop push their events; stopped disables the controls", async () => {
  await page.evaluate(() => window.harness.respond("clear", () => [["clear", {}]]));
  await page.click('[data-action="clear"]');
  await nextFrame(page);
  assert((await modelSize(page)) === 0, "log not cleared");
  await page.click('[data-action="stop"]');
  assert((await page.evaluate(() => window.harness.pushedEvents("stop").length)) === 1, "stop not pushed");
  await emit(page, "status", { status: "stopped", counters: { ...lastCounters, status: "stopped" } });
  assert((await page.textContent(".kt-status")) === "Stopped", "status is not Stopped");
  assert(await page.isDisabled('[data-action="pause"]'), "pause still enabled");
});

// --- completion ----------------------------------------------------------------------

// The server's answers (from KinoTrace.Complete, through the real controller) to every
// request the typing below makes; the harness answers each "complete" push with its seq.
const completing = await openWidget({ ...fixture.connect, events: [] });
await completing.evaluate((answers) => {
  window.harness.respond("complete", ({ text, seq }) => [["completions", { ...(answers[text] || { prefix: "", items: [] }), seq }]]);
}, fixture.completions);
const editor = ".kt-editor-input";
const suggestions = () => completing.$$eval(".kt-complete:not([hidden]) li .kt-complete-label", (els) => els.map((e) => e.textContent));
const chosen = () => completing.textContent(".kt-complete li.kt-complete-selected .kt-complete-label");
const listShown = () => completing.waitForSelector(".kt-complete:not([hidden]) li");
const listHidden = () => completing.waitForSelector(".kt-complete", { state: "hidden" });
const editorValue = () => completing.inputValue(editor);

await check("completion: typing shows the server's suggestions; Down then Enter accepts", async () => {
  await completing.click(editor);
  await completing.fill(editor, "");
  await completing.keyboard.type("SampleApp.Cache.fe", { delay: 20 });
  await listShown();
  const expected = fixture.completions["SampleApp.Cache.fe"].items.map((i) => i.label);
  await completing.waitForFunction((n) => document.querySelectorAll(".kt-complete li").length === n, expected.length);
  assert(JSON.stringify(await suggestions()) === JSON.stringify(expected), `suggestions ${await suggestions()}`);
  const asked = await completing.evaluate(() => window.harness.pushedEvents("complete").map((p) => p.payload.text));
  assert(asked.at(-1) === "SampleApp.Cache.fe", `last request ${asked.at(-1)}`);
  assert((await chosen()) === expected[0], `first selected: ${await chosen()}`);
  await completing.keyboard.press("ArrowDown");
  assert((await chosen()) === expected[1], `after Down: ${await chosen()}`);
  await completing.keyboard.press("Enter");
  await listHidden();
  assert((await editorValue()) === `SampleApp.Cache.${expected[1]}`, `value: ${JSON.stringify(await editorValue())}`);
});

await check("completion: the list sits under the line being typed; Up wraps, Tab accepts", async () => {
  await completing.keyboard.press("Enter"); // the list is closed: a new line
  await completing.keyboard.type(":ets.ins", { delay: 20 });
  await listShown();
  await completing.waitForFunction(() => [...document.querySelectorAll(".kt-complete li .kt-complete-label")].some((e) => e.textContent === "insert_new/2"));
  const place = await completing.$eval(editor, (field) => {
    const style = getComputedStyle(field);
    const context = document.createElement("canvas").getContext("2d");
    context.font = style.font;
    return {
      field: field.getBoundingClientRect().toJSON(),
      list: document.querySelector(".kt-complete").getBoundingClientRect().toJSON(),
      label: document.querySelector(".kt-complete-label").getBoundingClientRect().toJSON(),
      // where "ins" starts on the line: border, padding, then ":ets."
      textLeft: field.getBoundingClientRect().left + parseFloat(style.borderLeftWidth) + parseFloat(style.paddingLeft) + context.measureText(":ets.").width,
      lineBottom: field.getBoundingClientRect().top + parseFloat(style.borderTopWidth) + parseFloat(style.paddingTop) + 2 * parseFloat(style.lineHeight),
    };
  });
  // under line 2 of the field, the labels lined up with the text they replace
  assert(place.list.top >= place.lineBottom && place.list.top < place.lineBottom + 10, `list top ${place.list.top}, line 2 ends at ${place.lineBottom}`);
  assert(Math.abs(place.label.left - place.textLeft) < 3, `labels start at ${place.label.left}, "ins" at ${place.textLeft}`);
  await completing.keyboard.press("ArrowUp");
  assert((await chosen()) === "insert_new/2", `after Up: ${await chosen()}`);
  await completing.keyboard.press("Tab");
  await listHidden();
  const value = await editorValue();
  assert(value.endsWith("\n:ets.insert_new/2"), `value: ${JSON.stringify(value)}`);
  assert(await completing.$eval(editor, (e) => document.activeElement === e), "Tab moved the focus away");
});

await check("completion: arities after (; Escape closes and Enter is a new line again", async () => {
  await completing.keyboard.press("Enter");
  await completing.keyboard.type("Enum.map_join(", { delay: 20 });
  await listShown();
  const labels = await suggestions();
  assert(JSON.stringify(labels) === JSON.stringify(["map_join/2", "map_join/3"]), `arities ${labels}`);
  await completing.keyboard.press("Escape");
  await listHidden();
  await completing.keyboard.press("Enter");
  assert((await editorValue()).endsWith("Enum.map_join(\n"), `value: ${JSON.stringify(await editorValue())}`);
  await completing.keyboard.press("Backspace");
  await completing.keyboard.press("Backspace");
  assert((await editorValue()).endsWith("Enum.map_join"), `value: ${JSON.stringify(await editorValue())}`);
});

await check("completion: a click on a suggestion accepts it; Ctrl+Enter applies the completed lines", async () => {
  await completing.keyboard.press("End");
  await completing.keyboard.press("Enter");
  await completing.keyboard.type("SampleApp.Re", { delay: 20 });
  await listShown();
  await completing.click(".kt-complete li >> text=Repo");
  await listHidden();
  const value = await editorValue();
  assert(value.endsWith("\nSampleApp.Repo"), `value: ${JSON.stringify(value)}`);
  await completing.keyboard.press("Control+Enter");
  const pushed = await completing.evaluate(() => window.harness.pushedEvents("set_patterns").at(-1).payload.patterns);
  const expected = ["SampleApp.Cache." + fixture.completions["SampleApp.Cache.fe"].items[1].insert, ":ets.insert_new/2", "Enum.map_join", "SampleApp.Repo"];
  assert(JSON.stringify(pushed) === JSON.stringify(expected), `applied ${JSON.stringify(pushed)}`);
});

await check("completion: screenshot saved", async () => {
  const shot = await openWidget({ ...fixture.connect, events: [] }, { width: 900, height: 420, scale: 2 });
  await shot.evaluate((answers) => {
    window.harness.respond("complete", ({ text, seq }) => [["completions", { ...(answers[text] || { prefix: "", items: [] }), seq }]]);
  }, fixture.completions);
  await shot.click(editor);
  await shot.fill(editor, "");
  await shot.keyboard.type("SampleApp.Cache.fe");
  await shot.waitForSelector(".kt-complete:not([hidden]) li");
  await shot.keyboard.press("ArrowDown");
  const out = fixture.screenshot_completion || path.join(root, "test/browser/output/screenshot-completion.png");
  mkdirSync(path.dirname(out), { recursive: true });
  await shot.locator("#output").screenshot({ path: out });
  console.log(`  screenshot: ${out}`);
});

// --- 100 000 rows ------------------------------------------------------------------------

const big = await openWidget({ ...fixture.connect, events: [] });

// Entries made from the real rows, with fresh ids: a call and its return per pair.
async function fill(page, total, batchSize) {
  return page.evaluate(
    ([template, total, batchSize, counters]) => {
      const w = document.getElementById("output").__kinoTrace;
      let next = 1;
      const batch = () => {
        const out = [];
        while (out.length < batchSize) {
          for (const row of template) {
            if (out.length >= batchSize) break;
            const id = next++;
            out.push({ ...row, id, call_id: row.call_id == null ? null : id - 1 });
          }
        }
        return out;
      };
      while (w.model.received < total) window.harness.emit("events", { events: batch(), counters });
      return { size: w.model.size, makeBatch: null };
    },
    [allRows.filter((r) => r.kind === "call").slice(0, 1).concat(allRows.filter((r) => r.kind === "return").slice(0, 1)), total, batchSize, lastCounters]
  );
}

await check("100 000 rows are held and stay scrollable", async () => {
  await fill(big, 200_000, 1000); // 200 000 events: 100 000 calls, each with its return merged in
  const size = await modelSize(big);
  assert(size >= 100_000, `only ${size} rows held`);
  const domRows = await big.$$eval(".kt-vlist .kt-row", (rows) => rows.length);
  assert(domRows < 200, `${domRows} row elements in the DOM: not virtualised`);
  for (const fraction of [0.5, 0.1, 1]) {
    const seen = await big.evaluate(async (fraction) => {
      const s = document.querySelector(".kt-vlist");
      s.scrollTop = (s.scrollHeight - s.clientHeight) * fraction;
      await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      const rows = [...s.querySelectorAll(".kt-row")].filter((r) => r.style.display !== "none");
      const top = s.scrollTop;
      const visible = rows.filter((r) => {
        const y = Number(r.dataset.index) * 24;
        return y + 24 > top && y < top + s.clientHeight;
      });
      return { indexes: visible.map((r) => Number(r.dataset.index)), texts: visible.map((r) => r.querySelector(".kt-c-call").textContent), length: document.getElementById("output").__kinoTrace.model.viewLength };
    }, fraction);
    assert(seen.indexes.length >= 10, `only ${seen.indexes.length} rows visible at ${fraction}`);
    const expected = Math.floor((seen.length - 1) * fraction);
    assert(Math.abs(seen.indexes[Math.floor(seen.indexes.length / 2)] - expected) < 30, `at ${fraction}: rows ${seen.indexes[0]}..${seen.indexes.at(-1)}, expected near ${expected}`);
    assert(seen.texts.every((t) => t.length > 0), "empty rows rendered");
  }
});

let benchmark = null;
await check("benchmark: append a 1 000-event batch with 100 000 rows held", async () => {
  benchmark = await big.evaluate(async ([template, counters]) => {
    const w = document.getElementById("output").__kinoTrace;
    let next = 10_000_000;
    const calls = (n) => Array.from({ length: n }, () => ({ ...template, id: next++ }));
    const handler = [];
    const frame = [];
    for (let i = 0; i < 15; i++) {
      const batch = calls(1000);
      const t0 = performance.now();
      window.harness.emit("events", { events: batch, counters });
      const t1 = performance.now();
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
      const t2 = performance.now();
      if (i >= 5) {
        handler.push(t1 - t0);
        frame.push(t2 - t0);
      }
    }
    const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    return { held: w.model.size, handler: median(handler), frame: median(frame), max: Math.max(...handler) };
  }, [callRows[0], lastCounters]);
  assert(benchmark.held >= 100_000, `only ${benchmark.held} rows held`);
});
if (benchmark) {
  console.log(
    `BENCHMARK append 1000 events with ${benchmark.held} rows held: ` +
      `${benchmark.handler.toFixed(2)} ms in the event handler (median of 10, max ${benchmark.max.toFixed(2)} ms), ` +
      `${benchmark.frame.toFixed(2)} ms to the next frame`
  );
}

// --- screenshot ------------------------------------------------------------------------

await check("screenshot saved", async () => {
  const shot = await openWidget(fixture.connect, { width: 1180, height: 900, scale: 2 });
  await shot.evaluate((terms) => {
    window.harness.respond("get_term", ({ id }) => [["term", terms[String(id)] || { id, error: "unknown" }]]);
  }, fixture.terms);
  for (const batch of batches) await emit(shot, "events", batch);
  await shot.fill(".kt-editor-input", fixture.pattern_lines.join("\n"));
  await shot.evaluate((reply) => window.harness.respond("set_patterns", () => [["patterns", reply]]), fixture.pattern_reply);
  await shot.click('[data-action="apply-patterns"]');
  await shot.waitForSelector(".kt-line-error");
  // select a nested fetch that went to the repo
  const target = callRows.find((r) => r.call.startsWith("SampleApp.Cache.fetch(:orders, 1"));
  await shot.evaluate((id) => {
    const w = document.getElementById("output").__kinoTrace;
    const s = document.querySelector(".kt-vlist");
    let index = 0;
    for (let i = 0; i < w.model.viewLength; i++) if (w.model.viewAt(i).id === id) index = i;
    s.scrollTop = Math.max(0, index * 24 - 120);
  }, (target || callRows[0]).id);
  await nextFrame(shot);
  await shot.click(`.kt-vlist .kt-row[data-id="${(target || callRows[0]).id}"]`);
  await shot.waitForSelector(".kt-detail:not([hidden]) .kt-term");
  await shot.mouse.move(0, 0);
  const out = fixture.screenshot || path.join(root, "docs/screenshot.png");
  mkdirSync(path.dirname(out), { recursive: true });
  await shot.locator("#output").screenshot({ path: out });
  console.log(`  screenshot: ${out}`);
});

await finish();
