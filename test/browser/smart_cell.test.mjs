// Browser test of the "Trace" smart cell's form in real headless Chromium.
//
//   node test/browser/smart_cell.test.mjs PAYLOADS.json
//
// PAYLOADS.json is written by test/kino/trace/smart_cell/browser_test.exs with the real
// controller (KinoTrace.SmartCell.Controller): the connect payload of a cell and the
// server's check of every patterns text this script types. The harness stands in for
// Livebook's ctx and answers each "update" as the server does. The script fills the form
// like a user, then writes every update it pushed to `fixture.pushed_out`: the Elixir test
// replays them through the real controller and checks the code they make. Saves the
// README's screenshot of the cell. Exits 0 when every check passes.

import { writeFileSync, mkdirSync } from "node:fs";
import path from "node:path";
import { root, assert, openWidget, nextFrame, setup } from "./support.mjs";

const { fixture, base, browser, check, errors, external, finish } = await setup("smart_cell.test.mjs");

// The server's side of "update": store and echo the field; for patterns, its check.
async function openCell(opts = {}) {
  const page = await openWidget(browser, base, fixture.connect, { bundle: "smart-cell-build", errors, external, width: 1000, height: 700, ...opts });
  await page.evaluate((checks) => {
    window.harness.respond("update", ({ field, value }) => {
      const replies = [["update", { [field]: value }]];
      if (field === "patterns" && checks[value]) replies.push(["check", checks[value]]);
      return replies;
    });
    window.harness.respond("complete", ({ seq }) => [["completions", { ...window.completion, seq }]]);
  }, fixture.checks);
  await page.evaluate((c) => (window.completion = c), fixture.completion);
  return page;
}

const visibleRows = (page) =>
  page.$$eval(".kt-sc-row", (rows) => rows.filter((r) => !r.hidden).map((r) => r.querySelector(".kt-sc-label").textContent));
const updates = (page) => page.evaluate(() => window.harness.pushedEvents("update").map((e) => e.payload));

console.log("smart cell in Chromium:");
const page = await openCell();

await check("starts from the saved form: mode, patterns, limit and the server's check of each line", async () => {
  assert((await page.getAttribute('[data-mode="calls"]', "aria-pressed")) === "true", "calls is not the mode");
  const text = await page.inputValue('textarea[data-complete="patterns"]');
  assert(text === fixture.connect.form.patterns, `patterns: ${text}`);
  assert((await page.inputValue('input[data-field="limit"]')) === "1000", "limit not shown");
  const marks = await page.$$eval(".kt-editor-line", (ls) => ls.map((l) => l.classList.contains("kt-line-error")));
  assert(JSON.stringify(marks) === "[false,true,false]", `marks: ${JSON.stringify(marks)}`);
  const messages = await page.textContent(".kt-editor-messages");
  assert(messages.includes("line 2") && messages.includes("Enum.map/2"), `messages: ${messages}`);
});

await check("each mode shows its fields", async () => {
  const seen = {};
  for (const mode of ["messages", "processes", "stats", "calls"]) {
    await page.click(`[data-mode="${mode}"]`);
    await nextFrame(page);
    seen[mode] = await visibleRows(page);
  }
  assert(JSON.stringify(seen.calls) === JSON.stringify(["Patterns", "Processes", "Record", "Stop or drop", "Nodes"]), `calls: ${seen.calls}`);
  assert(JSON.stringify(seen.messages) === JSON.stringify(["Processes", "Only messages", "Stop or drop", "Nodes"]), `messages: ${seen.messages}`);
  assert(JSON.stringify(seen.processes) === JSON.stringify(["Processes", "Stop or drop", "Nodes"]), `processes: ${seen.processes}`);
  assert(JSON.stringify(seen.stats) === JSON.stringify(["Patterns", "Processes", "Nodes"]), `stats: ${seen.stats}`);
});

await check("typing patterns: sent when typing pauses, lines marked as the server checks them", async () => {
  await page.fill('textarea[data-complete="patterns"]', "");
  // line by line: Escape closes the completion list, so Enter is a new line
  const typedLines = fixture.typed.split("\n");
  for (const [i, line] of typedLines.entries()) {
    await page.type('textarea[data-complete="patterns"]', line, { delay: 5 });
    await page.press('textarea[data-complete="patterns"]', "Escape");
    if (i < typedLines.length - 1) await page.press('textarea[data-complete="patterns"]', "Enter");
  }
  await page.waitForFunction(
    (typed) => window.harness.pushedEvents("update").some((e) => e.payload.field === "patterns" && e.payload.value === typed),
    fixture.typed
  );
  await page.waitForSelector(".kt-line-error");
  const marks = await page.$$eval(".kt-editor-line", (ls) => ls.map((l) => l.classList.contains("kt-line-error")));
  assert(JSON.stringify(marks) === "[false,true]", `marks: ${JSON.stringify(marks)}`);
  const sent = (await updates(page)).filter((u) => u.field === "patterns");
  assert(sent.length < fixture.typed.length / 2, `sent on every key: ${sent.length}`);
  const asked = await page.evaluate(() => window.harness.pushedEvents("complete").length);
  assert(asked > 0, "no completion asked while typing");
});

await check("red while typing: a half-typed line is not marked while the completion list is open; it is once the list closes and typing pauses", async () => {
  const textarea = 'textarea[data-complete="patterns"]';
  await page.fill(textarea, "");
  await page.type(textarea, ":ets.insert_n", { delay: 5 });
  await page.waitForSelector(".kt-complete:not([hidden])");
  // the update of the half-typed line was sent; the server's check of it (an error)
  // is delivered in a timer queued before this one
  await page.waitForFunction(() => window.harness.pushedEvents("update").some((e) => e.payload.field === "patterns" && e.payload.value === ":ets.insert_n"));
  await page.evaluate(() => new Promise((r) => setTimeout(r, 0)));
  await nextFrame(page);
  const marked = async () => ({
    error: await page.$$eval(".kt-line-error", (ls) => ls.length),
    messages: await page.textContent(".kt-editor-messages"),
    open: await page.$$eval(".kt-complete:not([hidden])", (ls) => ls.length),
  });
  let now = await marked();
  assert(now.open === 1 && now.error === 0 && now.messages === "", `marked as soon as checked: ${JSON.stringify(now)}`);
  // a pause with the list still open (reading it): still not marked
  await page.waitForTimeout(1500);
  now = await marked();
  assert(now.open === 1 && now.error === 0 && now.messages === "", `marked with the list open: ${JSON.stringify(now)}`);
  // the list closed, typing paused: marked, with the server's message
  await page.press(textarea, "Escape");
  await page.waitForSelector(".kt-line-error");
  now = await marked();
  assert(now.open === 0 && now.messages.includes("line 1"), `after the pause: ${JSON.stringify(now)}`);
});

await check("completion: typing offers the server's completions; Tab accepts one", async () => {
  const textarea = 'textarea[data-complete="patterns"]';
  await page.fill(textarea, "");
  await page.type(textarea, ":ets.insert_n", { delay: 5 });
  await page.waitForSelector(".kt-complete:not([hidden])");
  const items = await page.$$eval(".kt-complete li", (lis) => lis.map((li) => li.textContent));
  assert(items.some((t) => t.includes("insert_new/2")), `items: ${items}`);
  await page.press(textarea, "Tab");
  const value = await page.inputValue(textarea);
  assert(value === ":ets.insert_new/2", `value: ${value}`);
  await page.waitForFunction(
    () => window.harness.pushedEvents("update").some((e) => e.payload.field === "patterns" && e.payload.value === ":ets.insert_new/2")
  );
});

await check("fill the rest like a user: processes by name, caller, rate, timeout, all nodes", async () => {
  await page.fill('textarea[data-complete="patterns"]', fixture.final_patterns);
  await page.selectOption('select[data-field="processes"]', "some");
  await page.fill('input[data-field="targets"]', "kino_trace_sc_browser");
  await page.press('input[data-field="targets"]', "Enter");
  await page.check('input[data-field="caller"]');
  await page.uncheck('input[data-field="exceptions"]');
  await page.fill('input[data-field="limit"]', "");
  await page.press('input[data-field="limit"]', "Tab");
  await page.fill('input[data-field="rate_count"]', "500");
  await page.press('input[data-field="rate_count"]', "Tab");
  await page.fill('input[data-field="timeout"]', "60000");
  await page.press('input[data-field="timeout"]', "Tab");
  await page.selectOption('select[data-field="nodes"]', "all");
  // Livebook syncs before it evaluates
  await page.evaluate(() => window.harness.sync());
  const sent = await updates(page);
  const last = Object.fromEntries(sent.map((u) => [u.field, u.value]));
  assert(last.patterns === fixture.final_patterns, `patterns: ${last.patterns}`);
  assert(last.targets === "kino_trace_sc_browser" && last.processes === "some", JSON.stringify(last));
  assert(last.caller === true && last.exceptions === false && last.rate_count === "500" && last.timeout === "60000", JSON.stringify(last));
  assert(last.limit === "" && last.nodes === "all", JSON.stringify(last));
  writeFileSync(fixture.pushed_out, JSON.stringify(sent));
});

// issue 39 item 3: Enter sent the field, then Chrome's change event sent it again; the
// server answers a value it already has with the value alone, and that answer cleared the
// error its check had just shown. The replies are the real controller's (node_replies).
await check("Enter in a field shows its error, which stays after leaving the field", async () => {
  const cell = await openCell();
  await cell.evaluate((replies) => {
    const general = window.harness.responders.get("update");
    const last = {};
    window.harness.respond("update", (payload) => {
      const known = replies[`${payload.field}=${payload.value}`];
      if (!known) return general(payload);
      const again = last[payload.field] === payload.value;
      last[payload.field] = payload.value;
      return again ? known.again : known.first;
    });
  }, fixture.node_replies);
  // every reply to what was pushed so far delivered (the harness answers in a timeout)
  const settle = () => cell.evaluate(() => new Promise((r) => setTimeout(() => setTimeout(r, 0), 0)));
  const error = () => cell.$eval('[data-error="nodes"]', (el) => (el.hidden ? "" : el.textContent));
  await cell.selectOption('select[data-field="nodes"]', "some");
  await cell.fill('input[data-field="node_names"]', "bad node");
  await cell.press('input[data-field="node_names"]', "Enter");
  await settle();
  const afterEnter = await error();
  await cell.press('input[data-field="node_names"]', "Tab");
  await settle();
  const afterTab = await error();
  const pushed = (await cell.evaluate(() => window.harness.pushedEvents("update").map((e) => e.payload))).filter((u) => u.field === "node_names");
  await cell.context().close();
  assert(afterEnter.includes("bad"), `no error after Enter: ${JSON.stringify(afterEnter)} (pushed ${JSON.stringify(pushed)})`);
  assert(afterTab === afterEnter, `after Tab: ${JSON.stringify(afterTab)}`);
});

await check("screenshot saved", async () => {
  const shot = await openCell({ width: 900, height: 600, scale: 2 });
  await shot.waitForSelector(".kt-line-error");
  await shot.mouse.move(0, 0);
  const out = fixture.screenshot;
  mkdirSync(path.dirname(out), { recursive: true });
  await shot.locator("#output").screenshot({ path: out });
  console.log(`  screenshot: ${out}`);
});

await finish();
