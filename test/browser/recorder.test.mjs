// Issue 37 item 5 in headless Chromium, on payloads the real controller made from a real
// recorder (test/kino/trace/widget/recorder_browser_test.exs): the recorder's panel shows
// the ring's fullness, what was overwritten, the triggers fired and the frozen snapshot;
// a click opens the snapshot's events; Download saves its trace file, written to
// fixture.download_out for the ExUnit test to open with Kino.Trace.open/1.
//
//   node test/browser/recorder.test.mjs PAYLOADS.json

import { mkdirSync } from "node:fs";
import path from "node:path";
import { assert, openWidget, emit, nextFrame, setup } from "./support.mjs";

const { fixture, base, browser, check, errors, external, finish } = await setup("recorder.test.mjs");
const page = await openWidget(browser, base, fixture.connect, { width: 1100, height: 800, errors, external });
const id = fixture.panel.snapshots[0].id;

await check("no panel until the recorder's figures come; then the ring, the triggers and the snapshot", async () => {
  assert(await page.locator('[data-testid="recorder"]').isHidden(), "the panel shows before a recorder's figures came");
  await emit(page, "recorder", fixture.panel);
  await nextFrame(page);
  const ring = await page.textContent('[data-testid="recorder-ring"]');
  assert(ring.includes(`${fixture.panel.kept} of ${fixture.panel.capacity} events`) && ring.includes(`${fixture.panel.overwritten} overwritten`), `the ring: ${ring}`);
  const triggers = await page.textContent('[data-testid="recorder-triggers"]');
  assert(triggers.includes("exception fired 1"), `the triggers: ${triggers}`);
  const items = await page.locator(".kt-recorder-item").allTextContents();
  assert(items.length === 1 && items[0].includes("exception") && items[0].includes(`${fixture.panel.snapshots[0].events} events`), `the snapshots: ${items}`);
});

await check("a click opens the snapshot's events, as the controller answered", async () => {
  await page.evaluate((reply) => window.harness.respond("open_snapshot", () => [["snapshot", reply]]), fixture.snapshot);
  await page.click('[data-action="open-snapshot"]');
  await page.waitForSelector('[data-testid="recorder-rows"]');
  const pushed = await page.evaluate(() => window.harness.pushedEvents("open_snapshot"));
  assert(pushed.length === 1 && pushed[0].payload.id === id, `pushed: ${JSON.stringify(pushed)}`);
  mkdirSync(path.dirname(fixture.screenshot), { recursive: true });
  await page.locator("#output").screenshot({ path: fixture.screenshot });
  console.log(`  screenshot: ${fixture.screenshot}`);
  const rows = await page.textContent('[data-testid="recorder-rows"]');
  assert(rows.includes("PanelOrders.fail") && rows.split("\n").length === fixture.snapshot.events.length, `the rows: ${rows}`);
});

await check("Download saves the snapshot's trace file", async () => {
  await page.evaluate((reply) => window.harness.respond("get_snapshot_file", () => [["snapshot_file", reply]]), fixture.file);
  const [download] = await Promise.all([page.waitForEvent("download"), page.click('[data-action="download-snapshot"]')]);
  assert(download.suggestedFilename() === fixture.file.name, `the file's name: ${download.suggestedFilename()}`);
  mkdirSync(path.dirname(fixture.download_out), { recursive: true });
  await download.saveAs(fixture.download_out);
});

await finish();
