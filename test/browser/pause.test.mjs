// Issue 39 item 5: Pause freezes the view while the trace goes on recording; the menu
// beside it pauses the trace itself. In two phases, each a run of this script on a
// fixture of test/kino/trace/widget/browser_test.exs:
//
//   "click": the user presses Pause; what the widget pushed is written to
//            fixture.pushed_out, for the ExUnit test to replay through the real
//            controller, then to make calls and collect what the controller sends.
//   "view":  those pushes (the calls made while the view was paused) arrive at a paused
//            widget: the rows stay still, the counters count; Resume shows them. Then
//            "Pause tracing" from the menu; its pushes are written to fixture.pushed_out.
//
//   node test/browser/pause.test.mjs PAYLOADS.json

import { writeFileSync } from "node:fs";
import { assert, openWidget, emit, nextFrame, setup } from "./support.mjs";

const { fixture, base, browser, check, errors, external, finish } = await setup("pause.test.mjs");
const page = await openWidget(browser, base, fixture.connect, { width: 1000, height: 700, errors, external });
const pushed = () => page.evaluate(() => window.harness.pushed);
const modelSize = () => page.evaluate(() => document.getElementById("output").__kinoTrace.model.size);

if (fixture.phase === "click") {
  await check("Pause says the trace goes on recording, and asks nothing of the server", async () => {
    const title = await page.getAttribute('[data-action="pause"]', "title");
    assert(/goes on recording/.test(title) && /counters keep counting/.test(title), `Pause's tooltip: ${title}`);
    await page.click('[data-action="pause"]');
    await nextFrame(page);
    assert((await page.textContent(".kt-status")) === "View paused", "the status does not say the view is paused");
    writeFileSync(fixture.pushed_out, JSON.stringify(await pushed()));
  });
} else {
  await check("while the view is paused, the calls made arrive and are counted, not shown; Resume shows them", async () => {
    const before = await modelSize();
    await page.click('[data-action="pause"]');
    for (const batch of fixture.batches) await emit(page, "events", batch);
    await nextFrame(page);
    assert((await modelSize()) === before, "rows were appended while the view was paused");
    const last = fixture.batches.at(-1).counters;
    const events = await page.getAttribute('[data-counter="events"]', "title");
    assert(events.startsWith(`${last.events.toLocaleString("en-US")} trace events`), `the events counter did not count: ${events}`);
    const held = fixture.batches.reduce((n, b) => n + b.events.length, 0);
    assert((await page.textContent(".kt-counters")).includes(`${held} held while paused`), "the held events are not counted");
    await page.click('[data-action="resume"]');
    await nextFrame(page);
    assert((await modelSize()) === before + fixture.calls, `after Resume ${await modelSize()} rows, expected ${before} + ${fixture.calls}`);
    assert((await page.textContent(".kt-status")) === "Running", "the status after Resume");
  });

  await check("the menu beside Pause pauses tracing itself, and says so", async () => {
    await page.click('[data-action="pause-menu"]');
    const title = await page.getAttribute('[data-action="pause-tracing"]', "title");
    assert(/not traced/.test(title), `Pause tracing's tooltip: ${title}`);
    await page.click('[data-action="pause-tracing"]');
    writeFileSync(fixture.pushed_out, JSON.stringify(await pushed()));
  });
}

await finish();
