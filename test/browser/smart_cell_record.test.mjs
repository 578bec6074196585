// Browser test of the "Trace" smart cell's Record mode in real headless Chromium.
//
//   node test/browser/smart_cell_record.test.mjs PAYLOADS.json
//
// PAYLOADS.json is written by test/kino/trace/smart_cell/record_browser_test.exs with the
// real controller (KinoTrace.SmartCell.Controller): the connect payload of a cell and the
// server's check of each match trigger this script types. The script chooses Record, sets
// its triggers and ring like a user, and writes every update it pushed to
// `fixture.pushed_out`: the Elixir test replays them through the real controller, runs the
// code (a recorder), triggers it, and saves the frozen snapshot. Exits 0 when every
// check passes.

import { writeFileSync } from "node:fs";
import { assert, openWidget, nextFrame, setup } from "./support.mjs";

const { fixture, base, browser, check, errors, external, finish } = await setup("smart_cell_record.test.mjs");

// The server's side of "update": store and echo the field; for the match trigger, its check.
const page = await openWidget(browser, base, fixture.connect, { bundle: "smart-cell-build", errors, external, width: 1000, height: 700 });
await page.evaluate((checks) => {
  window.harness.respond("update", ({ field, value }) => {
    const replies = [["update", { [field]: value }]];
    if (field === "on_match" && checks[value]) replies.push(["check", checks[value]]);
    return replies;
  });
}, fixture.on_match_checks);

const visibleRows = () =>
  page.$$eval(".kt-sc-row", (rows) => rows.filter((r) => !r.hidden).map((r) => r.querySelector(".kt-sc-label").textContent));
const updates = () => page.evaluate(() => window.harness.pushedEvents("update").map((e) => e.payload));
const onMatchError = () => page.$eval('[data-error="on_match"]', (el) => (el.hidden ? "" : el.textContent));

console.log("smart cell, Record mode, in Chromium:");

await check("Record shows the calls' fields, the triggers and the ring", async () => {
  await page.click('[data-mode="record"]');
  await nextFrame(page);
  const rows = await visibleRows();
  const expected = ["Patterns", "Processes", "Record", "Snapshot on", "Keep", "Stop or drop", "Nodes"];
  assert(JSON.stringify(rows) === JSON.stringify(expected), `rows: ${rows}`);
  assert((await page.getAttribute('[data-mode="record"]', "aria-pressed")) === "true", "record is not the mode");
});

await check("a match trigger the server refuses shows its error; fixed, the error goes", async () => {
  await page.fill('input[data-field="on_match"]', fixture.bad_match);
  await page.press('input[data-field="on_match"]', "Tab");
  await page.waitForFunction(() => !document.querySelector('[data-error="on_match"]').hidden);
  const error = await onMatchError();
  assert(error.includes("did you mean"), `error: ${error}`);
  await page.fill('input[data-field="on_match"]', fixture.good_match);
  await page.press('input[data-field="on_match"]', "Tab");
  await page.waitForFunction(() => document.querySelector('[data-error="on_match"]').hidden);
});

await check("set the triggers and the ring like a user", async () => {
  await page.check('input[data-field="on_exception"]');
  await page.fill('input[data-field="ring_events"]', "100");
  await page.press('input[data-field="ring_events"]', "Tab");
  await page.fill('input[data-field="after"]', "2");
  await page.press('input[data-field="after"]', "Tab");
  await page.evaluate(() => window.harness.sync());
  const sent = await updates();
  const last = Object.fromEntries(sent.map((u) => [u.field, u.value]));
  assert(last.mode === "record" && last.on_exception === true, JSON.stringify(last));
  assert(last.ring_events === "100" && last.after === "2" && last.on_match === fixture.good_match, JSON.stringify(last));
  writeFileSync(fixture.pushed_out, JSON.stringify(sent));
});

await finish();
