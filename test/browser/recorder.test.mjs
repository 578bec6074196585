// Issue 37 item 5 in headless Chromium, on payloads the real controller made from a real
// recorder (test/kino/trace/widget/recorder_browser_test.exs): the recorder's panel shows
// the ring's fullness, what was overwritten, the triggers fired and the frozen snapshot;
// a click shows the snapshot in the usual tabs (its own widget: Log, Sequence, Stats,
// Calls, Flame, its requests as "view" events), in place of the live ones, and "Back to
// the live recorder" brings those back; Download saves its trace file, written to
// fixture.download_out for the ExUnit test to open with Kino.Trace.open/1.
//
//   node test/browser/recorder.test.mjs PAYLOADS.json

import { mkdirSync } from "node:fs";
import path from "node:path";
import { assert, openWidget, emit, nextFrame, setup } from "./support.mjs";

const { fixture, base, browser, check, errors, external, finish } = await setup("recorder.test.mjs");
const page = await openWidget(browser, base, fixture.connect, { width: 1100, height: 900, errors, external });
const id = fixture.panel.snapshots[0].id;
const snapshotEvents = fixture.snapshot.view.events;
const view = '[data-testid="snapshot-view"]';
const live = "#output > .kt-root > .kt-live"; // (the snapshot's widget has its own)
const liveHeader = "#output > .kt-root > .kt-header";

await check("no panel until the recorder's figures come; then the ring, the triggers and the snapshot", async () => {
  assert(await page.locator('[data-testid="recorder"]').isHidden(), "the panel shows before a recorder's figures came");
  for (const payload of fixture.live) await emit(page, "events", payload);
  await emit(page, "recorder", fixture.panel);
  await nextFrame(page);
  const ring = await page.textContent('[data-testid="recorder-ring"]');
  assert(ring.includes(`${fixture.panel.kept} of ${fixture.panel.capacity} events`) && ring.includes(`${fixture.panel.overwritten} overwritten`), `the ring: ${ring}`);
  const triggers = await page.textContent('[data-testid="recorder-triggers"]');
  assert(triggers.includes("exception fired 1"), `the triggers: ${triggers}`);
  const items = await page.locator(".kt-recorder-item").allTextContents();
  assert(items.length === 1 && items[0].includes("exception") && items[0].includes(`${fixture.panel.snapshots[0].events} events`), `the snapshots: ${items}`);
  const rows = await page.locator(`${live} .kt-vlist .kt-row`).allTextContents();
  assert(rows.some((r) => r.includes("noise(1)")), `the live log: ${rows}`);
});

await check("a click shows the snapshot in the usual tabs, in place of the live ones", async () => {
  await page.evaluate((reply) => window.harness.respond("open_snapshot", () => [["snapshot", reply]]), fixture.snapshot);
  await page.evaluate((replies) => window.harness.respond("view", (p) => (replies[p.event] ? [["view", replies[p.event]]] : [])), fixture.view_replies);
  await page.click('[data-action="open-snapshot"]');
  await page.waitForSelector(`${view} .kt-vlist .kt-row`);
  const pushed = await page.evaluate(() => window.harness.pushedEvents("open_snapshot"));
  assert(pushed.length === 1 && pushed[0].payload.id === id, `pushed: ${JSON.stringify(pushed)}`);
  assert(await page.locator(live).isHidden(), "the live tabs still show");
  assert(await page.locator(liveHeader).isHidden(), "the live header still shows");
  const bar = await page.textContent('[data-testid="recorder-bar"]');
  assert(bar.includes("Showing the snapshot of") && bar.includes("exception in"), `the bar: ${bar}`);
  const tabs = await page.$$eval(`${view} [data-tab]`, (bs) => bs.map((b) => b.dataset.tab));
  assert(tabs.join() === "log,sequence,stats,calls,flame", `the tabs: ${tabs}`);
  // the snapshot's rows, not the live log's
  const rows = await page.locator(`${view} .kt-vlist .kt-row`).allTextContents();
  assert(rows.some((r) => r.includes("PanelOrders.fail")) && !rows.some((r) => r.includes("noise(1)")), `the snapshot's log: ${rows}`);
  const status = await page.getAttribute(`${view} [data-status]`, "data-status");
  assert(status === "stopped", `the snapshot's status: ${status}`);
  mkdirSync(path.dirname(fixture.screenshot), { recursive: true });
  await page.locator("#output").screenshot({ path: fixture.screenshot });
  console.log(`  screenshot: ${fixture.screenshot}`);
});

await check("the snapshot's row opens its terms, asked as a 'view' event", async () => {
  await page.locator(`${view} .kt-vlist .kt-row`, { hasText: "PanelOrders.fail" }).first().click();
  await page.waitForFunction((sel) => (document.querySelector(`${sel} [data-testid="detail"]`)?.textContent || "").includes("no stock"), view);
  const asked = await page.evaluate(() => window.harness.pushedEvents("view").map((p) => p.payload));
  assert(asked.every((p) => p.id === id), `a view event for another snapshot: ${JSON.stringify(asked)}`);
  assert(asked.some((p) => p.event === "get_term" && p.payload.id === fixture.exception_id), `no get_term of the exception: ${JSON.stringify(asked)}`);
});

await check("the Stats, Calls and Flame tabs show the snapshot's calls", async () => {
  await page.click(`${view} [data-tab="stats"]`);
  const stats = await page.$$eval(`${view} .kt-stats tbody tr td:first-child`, (tds) => tds.map((td) => td.textContent));
  assert(stats.some((s) => s.includes("PanelOrders.fail/1")), `the stats: ${stats}`);
  await page.click(`${view} [data-tab="calls"]`);
  const calls = await page.textContent(`${view} [data-panel="calls"]`);
  assert(calls.includes("PanelOrders"), `the calls: ${calls}`);
  await page.click(`${view} [data-tab="flame"]`);
  await page.waitForFunction(() => document.getElementById("output").__kinoTrace.snapshotView.widget.flame.model.size > 1);
  const asked = await page.evaluate(() => window.harness.pushedEvents("view").map((p) => p.payload));
  assert(asked.some((p) => p.event === "get_flame" && p.id === id), `no get_flame for the snapshot: ${JSON.stringify(asked)}`);
  // nothing was asked of the live trace meanwhile
  const direct = await page.evaluate(() => window.harness.pushed.filter((p) => ["get_term", "get_flame"].includes(p.event)).length);
  assert(direct === 0, `${direct} requests went to the live trace`);
  assert(snapshotEvents.length > 0, "the snapshot had no events");
});

await check("Back to the live recorder brings the live header and tabs back", async () => {
  await page.click('[data-action="back-to-live"]');
  await page.waitForSelector(view, { state: "detached" });
  assert(await page.locator(live).isVisible(), "the live tabs are hidden");
  assert(await page.locator(liveHeader).isVisible(), "the live header is hidden");
  assert(await page.locator('[data-testid="recorder-bar"]').isHidden(), "the bar still shows");
  const rows = await page.locator(`${live} .kt-vlist .kt-row`).allTextContents();
  assert(rows.some((r) => r.includes("noise(1)")), `the live log: ${rows}`);
});

await check("Download saves the snapshot's trace file", async () => {
  await page.evaluate((reply) => window.harness.respond("get_snapshot_file", () => [["snapshot_file", reply]]), fixture.file);
  const [download] = await Promise.all([page.waitForEvent("download"), page.click('[data-action="download-snapshot"]')]);
  assert(download.suggestedFilename() === fixture.file.name, `the file's name: ${download.suggestedFilename()}`);
  mkdirSync(path.dirname(fixture.download_out), { recursive: true });
  await download.saveAs(fixture.download_out);
});

await finish();
