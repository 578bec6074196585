// Issue 25 in headless Chromium, on real traces (test/kino/trace/widget/views_browser_test.exs):
// the header of a trace of messages or processes alone, the sequence tab of a trace of
// calls alone, a sleep that is no message. At 1 000 and 600 px wide.
//
//   node test/browser/views.test.mjs PAYLOADS.json

import { mkdirSync } from "node:fs";
import path from "node:path";
import { assert, openWidget, emit, nextFrame, setup } from "./support.mjs";

const { fixture, base, browser, check, errors, external, finish } = await setup("views.test.mjs");
const WIDTHS = [1000, 600];

const open = (data, opts = {}) => openWidget(browser, base, data, { errors, external, height: 800, ...opts });
async function feed(page, batches) {
  for (const batch of batches) await emit(page, "events", batch);
  await nextFrame(page);
}
// What overflows the widget sideways: elements whose right edge passes the widget's.
const overflow = (page, selector) =>
  page.evaluate((sel) => {
    const root = document.querySelector(".kt-root").getBoundingClientRect();
    return [...document.querySelectorAll(sel)]
      .filter((el) => el.getBoundingClientRect().width > 0 && el.getBoundingClientRect().right > root.right + 0.5)
      .map((el) => `${el.className} right ${Math.round(el.getBoundingClientRect().right)} > ${Math.round(root.right)}`);
  }, selector);
async function shoot(page, out) {
  await page.mouse.move(0, 0);
  mkdirSync(path.dirname(out), { recursive: true });
  await page.locator("#output").screenshot({ path: out });
  console.log(`  screenshot: ${out}`);
}

console.log("what each trace has, in Chromium:");

for (const width of WIDTHS) {
  await check(`${width} px: a trace of messages alone shows its targets, not the call-pattern editor with an Apply button`, async () => {
    const M = fixture.messages;
    const page = await open(M.connect, { width });
    await feed(page, M.batches);
    assert(!(await page.$(".kt-editor-input")), "a pattern editor is shown");
    assert(!(await page.$('[data-action="apply-patterns"]')), "an Apply button is shown");
    const html = await page.content();
    assert(!html.includes("MyApp.Repo.get/2"), "the call-pattern placeholder is in the page");
    const summary = await page.textContent('[data-testid="trace-summary"]');
    assert(summary.includes("Messages of") && summary.includes(M.worker) && summary.includes("every message"), `summary: ${summary}`);
    const out = await overflow(page, ".kt-header *");
    assert(out.length === 0, `the header overflows: ${out.join("; ")}`);
    // the sleep between the two jobs is no message: no row, no arrow
    const rows = await page.$$eval(".kt-vlist .kt-row", (rs) => rs.map((r) => r.textContent));
    assert(rows.length >= 5 && !rows.some((r) => r.includes(":timeout")), `rows: ${rows.join(" | ")}`);
    await page.click('[data-tab="sequence"]');
    await nextFrame(page);
    const labels = await page.$$eval(".kt-seq-label", (ls) => ls.map((l) => l.textContent));
    assert(labels.length >= 5 && !labels.some((l) => l.includes("timeout")), `sequence: ${labels.join(" | ")}`);
    assert(!M.mermaid.source.includes("timeout"), "Mermaid has the timeout");
    await page.click('[data-tab="log"]');
    await nextFrame(page);
    if (width === 1000) await shoot(page, fixture.screenshots.messages_header);
    await page.context().close();
  });
}

await check("a trace of process events alone shows its targets, no editor", async () => {
  const page = await open(fixture.processes.connect, { width: 600 });
  assert(!(await page.$(".kt-editor-input")), "a pattern editor is shown");
  const summary = await page.textContent('[data-testid="trace-summary"]');
  assert(summary.includes("Process events of") && summary.includes(":new"), `summary: ${summary}`);
  await page.context().close();
});

for (const width of WIDTHS) {
  await check(`${width} px: the sequence tab of a trace of calls alone says there are no messages and opens the call tree`, async () => {
    const C = fixture.calls;
    const page = await open(C.connect, { width });
    assert(await page.$(".kt-editor-input"), "a trace of calls has no editor");
    assert(!(await page.$('[data-testid="trace-summary"]')), "a trace of calls shows a summary");
    await feed(page, C.batches);
    await page.click('[data-tab="sequence"]');
    await nextFrame(page);
    const note = page.locator('[data-testid="sequence-calls-only"]');
    assert(await note.isVisible(), "no note on the sequence tab");
    assert((await note.textContent()).includes("No messages in this trace"), await note.textContent());
    assert(!(await page.isVisible('[data-testid="sequence"]')), "the empty diagram is still shown");
    assert(!(await page.isVisible('[data-action="copy-mermaid"]')), "Copy as Mermaid offered with nothing to copy");
    const out = await overflow(page, ".kt-seq-calls-only, .kt-seq-calls-only *");
    assert(out.length === 0, `the note overflows: ${out.join("; ")}`);
    if (width === 1000) await shoot(page, fixture.screenshots.sequence_calls);
    await page.click('[data-action="show-calls"]');
    await nextFrame(page);
    assert((await page.getAttribute('[data-tab="calls"]', "aria-selected")) === "true", "the Calls tab is not open");
    const tree = await page.textContent('[data-panel="calls"]');
    assert(tree.includes(C.user) && tree.includes("SampleApp.Cache.fetch"), `call tree: ${tree.slice(0, 200)}`);
    await page.context().close();
  });
}

for (const width of WIDTHS) {
  await check(`${width} px: the sequence tab of a trace of calls and messages draws the processes that talk first, in view`, async () => {
    const X = fixture.mixed;
    const page = await open(X.connect, { width });
    await feed(page, X.batches);
    await page.click('[data-tab="sequence"]');
    await nextFrame(page);
    const lanes = await page.$$eval(".kt-seq-lane", (cells) => cells.map((c) => ({ pid: c.dataset.pid, left: c.getBoundingClientRect().left, right: c.getBoundingClientRect().right })));
    const box = await page.$eval('[data-testid="sequence"]', (el) => ({ left: el.getBoundingClientRect().left, right: el.getBoundingClientRect().right }));
    assert(lanes.length >= 5, `lanes: ${lanes.map((l) => l.pid).join(", ")}`);
    const order = [...lanes].sort((a, b) => a.left - b.left).map((l) => l.pid);
    assert(order[0] === X.user && order[1] === X.server, `lanes left to right: ${order.join(", ")} (user ${X.user}, server ${X.server})`);
    const user = lanes.find((l) => l.pid === X.user);
    assert(user.left >= box.left && user.right <= box.right + 0.5, `the user's lane ${Math.round(user.left)}-${Math.round(user.right)} is not in view (${Math.round(box.left)}-${Math.round(box.right)})`);
    const arrows = await page.$$eval('.kt-seq-item[data-type="message"]', (items) => items.length);
    assert(arrows >= 6, `${arrows} message arrows`);
    await page.context().close();
  });
}

await finish();
