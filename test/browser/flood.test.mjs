// Issue 25, "tab switch under load", in headless Chromium: the pushes of a real flood
// (test/kino/trace/widget/views_browser_test.exs) are replayed into the widget at twice
// the controller's pace (a 1 000-event push every 50 ms) while the tabs are switched;
// each switch is timed from the click to the paint after it (two animation frames).
//
//   node test/browser/flood.test.mjs PAYLOADS.json
//
// No absolute time is asserted: the machine is shared and may be busy. The reference is
// an idle switch, on an empty widget with nothing arriving: two frames of this browser on
// this machine now, whatever its load. Under the flood, each tab's median switch must
// stay within RATIO of it. Two frames are ~35 ms here, and the aim, under 100 ms, is
// about 3 of them: quiet, the flood's medians were 1 to 2x (the Calls tab 50-60 ms).
// A CPU hog beside the test slows the flood's switches more than the reference (the
// page has work to share the core with): 4.6x for the Calls tab in one such run. So
// 8x: generous for a hog and a shared machine, and still far under the fault it
// guards against (before the fix the Calls tab's median was 846 ms, 25x, and single
// switches up to 1.4 s).

// Issue 39 item 12 adds the tail: every switch (p95), and the gaps between animation
// frames during the flood (p99 and max), with the long tasks Chromium reports. The issue's
// target, on a quiet machine with a CPU hog beside the BEAM, is p95 under 100 ms for
// every interaction and p99 under 100 ms for frame gaps. The flood runs twice, the second
// time with a busy process beside the browser; both are asserted as such with
// KINO_TRACE_QUIET_MACHINE=1, and on a shared machine only printed (see TARGET_MS).

import { spawn } from "node:child_process";
import { assert, openWidget, emit, nextFrame, setup } from "./support.mjs";

const RATIO = 8;
const ROUNDS = 5;
const TABS = ["stats", "calls", "sequence", "log"];
const TARGET_MS = 100;
// On this shared machine (load 17-22 on 2 cores, the renderer at ~15% of a core), the
// tail moved too much from run to run to assert against the idle widget's: before the
// fix, switches p95 372 ms (idle 84), frame gaps p99 350 ms (idle 67), 23 long tasks up
// to 260 ms; after it, in three runs, switches p95 196-430 ms, frame gaps p99 133-217 ms,
// 6-15 long tasks up to 87-186 ms. So it is printed, and asserted on a quiet machine.
const QUIET = process.env.KINO_TRACE_QUIET_MACHINE === "1";

const { fixture, base, browser, check, errors, external, finish } = await setup("flood.test.mjs");

// Each tab switched to ROUNDS times: ms from the click to the paint after it, per tab;
// meanwhile the gaps between animation frames and the long tasks.
const switchTimes = (page) =>
  page.evaluate(
    async ([tabs, rounds]) => {
      const frames = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
      const gaps = [];
      const longTasks = [];
      let last = null;
      let running = true;
      const tick = (t) => {
        if (last != null) gaps.push(t - last);
        last = t;
        if (running) requestAnimationFrame(tick);
      };
      requestAnimationFrame(tick);
      const observer = new PerformanceObserver((list) => list.getEntries().forEach((e) => longTasks.push(Math.round(e.duration))));
      observer.observe({ type: "longtask" });
      const times = {};
      for (let i = 0; i < rounds; i++) {
        for (const tab of tabs) {
          await frames();
          const t0 = performance.now();
          document.querySelector(`[data-tab="${tab}"]`).click();
          await frames();
          (times[tab] ||= []).push(Math.round(performance.now() - t0));
        }
      }
      running = false;
      observer.disconnect();
      return { times, gaps: gaps.map(Math.round), longTasks };
    },
    [TABS, ROUNDS]
  );
const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const quantile = (xs, q) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];
const summary = (xs) => `p50 ${quantile(xs, 0.5)}, p95 ${quantile(xs, 0.95)}, p99 ${quantile(xs, 0.99)}, max ${Math.max(...xs)} ms (${xs.length})`;

// The real pushes again and again, their ids moved on each time round (ids are unique in
// a trace): a flood as long as the test needs.
async function installReplay(page) {
  await page.evaluate((batches) => {
    const span = Math.max(...batches.flatMap((b) => b.events.map((e) => e.id || 0))) + 1;
    let k = 0;
    window.nextBatch = () => {
      const round = Math.floor(k / batches.length);
      const batch = batches[k++ % batches.length];
      const shift = (e) => (e == null ? e : e + round * span);
      return { counters: batch.counters, events: batch.events.map((e) => ({ ...e, id: shift(e.id), call_id: shift(e.call_id) })) };
    };
  }, fixture.batches);
}

console.log(`flood: ${fixture.batches.length} real pushes, up to ${Math.round(fixture.rate)} events/s traced`);

// One flooded widget's tab switches and frame gaps, with `hog` running meanwhile (or not).
async function floodRun(hog) {
  const page = await openWidget(browser, base, fixture.connect, { width: 1000, height: 800, errors, external });
  await installReplay(page);
  // a flood that has gone on for a while: 150 pushes held (150 000 events)
  await page.evaluate(() => {
    for (let i = 0; i < 150; i++) window.harness.emit("events", window.nextBatch());
  });
  await nextFrame(page);
  const held = await page.evaluate(() => document.getElementById("output").__kinoTrace.model.size);
  assert(held >= 50_000, `only ${held} entries held`);
  const hogProcess = hog ? spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" }) : null;
  try {
    await page.evaluate(() => (window.flood = setInterval(() => window.harness.emit("events", window.nextBatch()), 50)));
    const flood = await switchTimes(page);
    const arrived = await page.evaluate(() => (clearInterval(window.flood), document.getElementById("output").__kinoTrace.model.received));
    return { ...flood, held, arrived };
  } finally {
    if (hogProcess) hogProcess.kill("SIGKILL");
    await page.context().close();
  }
}

await check(`switching tabs during a flood: each tab's median switch within ${RATIO}x an idle switch; the tail measured`, async () => {
  // the reference: an empty widget, nothing arriving
  const idlePage = await openWidget(browser, base, fixture.connect, { width: 1000, height: 800, errors, external });
  const idle = await switchTimes(idlePage);
  const idleSwitches = Object.values(idle.times).flat();
  const reference = median(idleSwitches);
  await idlePage.context().close();

  const flood = await floodRun(false);
  const switches = Object.values(flood.times).flat();
  console.log(`  idle switch (reference): median ${reference} ms of ${JSON.stringify(idle.times)}`);
  console.log(`  idle: switches ${summary(idleSwitches)}; frame gaps ${summary(idle.gaps)}`);
  console.log(`  during the flood (${flood.held} entries held, ${flood.arrived} events in all): ${JSON.stringify(flood.times)}`);
  console.log(`  flood: switches ${summary(switches)}; frame gaps ${summary(flood.gaps)}`);
  console.log(`  flood: ${flood.longTasks.length} long tasks: ${flood.longTasks.length ? summary(flood.longTasks) : "none"}`);
  const slow = TABS.filter((tab) => median(flood.times[tab]) > RATIO * reference).map((tab) => `${tab}: median ${median(flood.times[tab])} ms`);
  assert(slow.length === 0, `slower than ${RATIO} x ${reference} ms: ${slow.join(", ")}`);

  // Issue 39 item 12's condition: the same flood with a CPU hog (a busy process) beside.
  const hogged = await floodRun(true);
  const hoggedSwitches = Object.values(hogged.times).flat();
  console.log(`  flood with a CPU hog beside: switches ${summary(hoggedSwitches)}; frame gaps ${summary(hogged.gaps)}; ${hogged.longTasks.length} long tasks`);
  if (QUIET) {
    for (const [what, run, all] of [["", flood, switches], [" with a CPU hog", hogged, hoggedSwitches]]) {
      assert(quantile(all, 0.95) < TARGET_MS, `switches during the flood${what}: ${summary(all)}`);
      assert(quantile(run.gaps, 0.99) < TARGET_MS, `frame gaps during the flood${what}: ${summary(run.gaps)}`);
    }
  }
});

await finish();
