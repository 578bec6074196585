// Browser test of message rows, the sequence tab and the stats widget, in real headless
// Chromium.
//
//   node test/browser/messages.test.mjs PAYLOADS.json
//
// PAYLOADS.json is written by test/kino/trace/widget/browser_test.exs from real traces: a
// ping-pong of a few hundred messages with calls and lifecycle events (through
// KinoTrace.Widget.Controller), and a stats session (through StatsController). Exits 0
// when every check passes; saves screenshots of the sequence tab, the message log and
// the stats widget.

import { mkdirSync } from "node:fs";
import path from "node:path";
import { assert, openWidget, emit, nextFrame, setup } from "./support.mjs";
import { openMermaid, checkDiagrams } from "./mermaid.mjs";

const { fixture, base, browser, check, errors, external, finish } = await setup("messages.test.mjs");
const open = (data, opts = {}) => openWidget(browser, base, data, { errors, external, ...opts });

const M = fixture.messages;
const batches = M.batches;
const rows = batches.flatMap((b) => b.events);
const sends = rows.filter((r) => r.kind === "send");
const firstPing = sends.find((r) => r.pid === M.ping && r.data.startsWith("{:ping,") && r.data.endsWith(", 1}"));
console.log(`fixture: ${rows.length} events (${sends.length} sends) from a real ping-pong trace; ${fixture.stats.update.snapshot.rows.length} functions from a real stats session`);
assert(firstPing, "the fixture has no first ping");

const widget = (page) => page.evaluate(() => document.getElementById("output").__kinoTrace && true);
async function feed(page) {
  for (const batch of batches) await emit(page, "events", batch);
  await nextFrame(page);
}
async function answerTerms(page) {
  await page.evaluate((terms) => {
    window.harness.respond("get_term", ({ id }) => [["term", terms[String(id)] || { id, error: "unknown" }]]);
  }, M.terms);
}

console.log("message rows and the sequence tab:");
const page = await open(M.connect);
await answerTerms(page);
await feed(page);
assert(await widget(page), "no widget");

await check("message and process events are log rows with their own look", async () => {
  await page.fill(".kt-filter", firstPing.data);
  await nextFrame(page);
  const seen = await page.$$eval(".kt-vlist .kt-row", (els) =>
    els
      .filter((r) => r.style.display !== "none")
      .map((r) => ({
        kind: r.dataset.kind,
        badge: r.querySelector(".kt-kind").hidden ? null : r.querySelector(".kt-kind").textContent,
        tone: r.querySelector(".kt-kind").className,
        text: r.querySelector(".kt-c-text").textContent,
        out: r.querySelector(".kt-c-out").textContent,
        who: r.querySelector(".kt-c-who").textContent,
        color: getComputedStyle(r.querySelector(".kt-kind")).color,
      }))
  );
  const send = seen.find((r) => r.kind === "send");
  const receive = seen.find((r) => r.kind === "receive");
  assert(send && receive, `expected a send and a receive row for ${firstPing.data}, got ${JSON.stringify(seen)}`);
  assert(send.badge === "→send" && send.tone.includes("kt-tone-send"), `send badge: ${JSON.stringify(send)}`);
  assert(send.text === firstPing.data, `send text: ${send.text}`);
  assert(send.out === `→ ${M.pong}`, `send row does not show → peer: ${send.out}`);
  assert(send.who === M.ping, `send row's process: ${send.who}`);
  assert(receive.badge === "←receive" && receive.tone.includes("kt-tone-receive") && receive.who === M.pong, `receive: ${JSON.stringify(receive)}`);
  assert(send.color !== receive.color, "send and receive badges look the same");

  await page.fill(".kt-filter", "");
  await nextFrame(page);
  const kinds = await page.evaluate(() => {
    const w = document.getElementById("output").__kinoTrace;
    return w.model.all().map((e) => e.kind);
  });
  for (const kind of ["exit", "spawn", "link", "register", "call"]) assert(kinds.includes(kind), `no ${kind} entry in the log`);
});

await check("message rows filter like calls: by kind, by content, by peer", async () => {
  await page.fill(".kt-filter", "exit");
  await nextFrame(page);
  const exits = await page.$$eval(".kt-vlist .kt-row", (els) => els.filter((r) => r.style.display !== "none").map((r) => [r.dataset.kind, r.querySelector(".kt-c-text").textContent, r.querySelector(".kt-kind").className]));
  assert(exits.length === 1 && exits[0][0] === "exit" && exits[0][1] === "{:shutdown, :done}", `exit filter: ${JSON.stringify(exits)}`);
  assert(exits[0][2].includes("kt-tone-exit"), "a {:shutdown, _} exit is shown as a normal exit");
  await page.fill(".kt-filter", ":pong");
  await nextFrame(page);
  const pongs = await page.evaluate(() => document.getElementById("output").__kinoTrace.model.viewLength);
  assert(pongs >= 2 * M.rounds, `only ${pongs} entries match :pong`);
  await page.fill(".kt-filter", "");
  await nextFrame(page);
});

await check("stats and calls tabs count only the calls", async () => {
  await page.click('[data-tab="stats"]');
  const stats = await page.$$eval(".kt-stats tbody tr", (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  const calls = rows.filter((r) => r.kind === "call").length;
  assert(stats.length === 1 && stats[0][0] === "KinoTraceTest.SequenceSample.reply/1", `stats rows: ${JSON.stringify(stats)}`);
  assert(Number(stats[0][1]) === calls, `reply/1 counted ${stats[0][1]}, expected ${calls}`);
  await page.click('[data-tab="calls"]');
  const trees = await page.$$eval(".kt-tree-process", (els) => els.length);
  assert(trees === 1, `${trees} call trees, expected the server's only`);
});

const laneCenter = (page, pid) =>
  page.$eval(`.kt-seq-lane[data-pid="${pid}"]`, (el) => el.offsetLeft + el.offsetWidth / 2);

await check("sequence tab: lifelines for ping and pong, each message an arrow between the right ones", async () => {
  await page.click('[data-tab="sequence"]');
  await page.evaluate(() => {
    const s = document.querySelector(".kt-seq-scroll");
    s.scrollTop = 0;
  });
  await nextFrame(page);
  const lanes = await page.$$eval(".kt-seq-lane", (els) => els.map((e) => e.dataset.pid));
  assert(lanes.includes(M.ping) && lanes.includes(M.pong), `lanes ${lanes}`);
  const pingX = await laneCenter(page, M.ping);
  const pongX = await laneCenter(page, M.pong);
  const arrows = await page.$$eval(".kt-seq-t-message", (els) =>
    els.map((g) => {
      const w = document.getElementById("output").__kinoTrace;
      const row = w.sequence.rowAt(Number(g.dataset.seq));
      return { seq: Number(g.dataset.seq), label: row.label, from: row.entry.pid, received: !!row.receive, x1: Number(g.querySelector("circle").getAttribute("cx")), x2: Number(g.querySelector("line").getAttribute("x2")) };
    })
  );
  const ping = arrows.find((a) => a.label === firstPing.data);
  assert(ping, `no arrow for ${firstPing.data} among ${arrows.slice(0, 5).map((a) => a.label)}`);
  assert(Math.abs(ping.x1 - pingX) < 1 && Math.abs(ping.x2 - pongX) < 12 && ping.x2 > ping.x1 === pongX > pingX, `ping arrow ${ping.x1}→${ping.x2}, lanes ping ${pingX} pong ${pongX}`);
  assert(ping.received, "the ping's receive was not paired with its send");
  const pong = arrows.find((a) => a.label === "{:pong, 10}");
  assert(pong && Math.abs(pong.x1 - pongX) < 1 && Math.abs(pong.x2 - pingX) < 12, `pong arrow ${JSON.stringify(pong)}`);
  const count = await page.textContent('[data-tab="sequence"] .kt-tab-count');
  assert(Number(count) >= 2 * M.rounds, `sequence tab counts ${count} messages`);
  // calls on the server's lane, as activations with their return merged in
  const call = await page.$eval("text.kt-seq-call", (el) => el.textContent).catch(() => null);
  assert(call && call.startsWith("SequenceSample.reply("), `call label: ${call}`);
  const title = await page.$eval("text.kt-seq-call", (el) => el.closest(".kt-seq-item").querySelector("title").textContent);
  assert(title.startsWith("KinoTraceTest.SequenceSample.reply(") && title.includes("-> "), `call tooltip: ${title}`);
});

await check("with hundreds of messages the sequence scrolls, keeps its sizes and draws only what is in view", async () => {
  const info = await page.evaluate(async () => {
    const s = document.querySelector(".kt-seq-scroll");
    const w = document.getElementById("output").__kinoTrace;
    const before = document.querySelectorAll(".kt-seq-item").length;
    s.scrollTop = (s.scrollHeight - s.clientHeight) / 2;
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    const items = [...document.querySelectorAll(".kt-seq-item")].map((g) => Number(g.dataset.seq));
    const lane = document.querySelector(".kt-seq-lane");
    return {
      rows: w.sequence.end - w.sequence.start,
      scrollHeight: s.scrollHeight,
      clientHeight: s.clientHeight,
      before,
      items,
      laneWidth: lane.getBoundingClientRect().width,
      middle: Math.round((s.scrollTop + s.clientHeight / 2 - 46) / 30),
    };
  });
  assert(info.rows >= 2 * M.rounds, `${info.rows} rows`);
  assert(info.scrollHeight > 10 * info.clientHeight, `not scrollable: ${info.scrollHeight} / ${info.clientHeight}`);
  assert(info.before < 80 && info.items.length < 80, `${info.items.length} items drawn: not virtualised`);
  assert(info.laneWidth >= 150, `lanes shrank to ${info.laneWidth}px`);
  const mid = info.items.slice().sort((a, b) => a - b)[Math.floor(info.items.length / 2)];
  assert(Math.abs(mid - info.middle) < 15, `drawn rows around ${mid}, view around ${info.middle}`);
});

await check("clicking an arrow asks for the full message and shows it", async () => {
  const target = sends.find((r) => r.pid === M.ping && r.data.endsWith(", 7}"));
  await page.evaluate((id) => {
    const w = document.getElementById("output").__kinoTrace;
    const s = document.querySelector(".kt-seq-scroll");
    for (let seq = w.sequence.start; seq < w.sequence.end; seq++) {
      const row = w.sequence.rowAt(seq);
      if (row.entry.id === id) s.scrollTop = Math.max(0, (seq - w.sequence.start) * 30 - 100);
    }
  }, target.id);
  await nextFrame(page);
  const item = await page.evaluate((id) => {
    const w = document.getElementById("output").__kinoTrace;
    const g = [...document.querySelectorAll(".kt-seq-t-message")].find((g) => w.sequence.rowAt(Number(g.dataset.seq)).entry.id === id);
    return g ? g.dataset.seq : null;
  }, target.id);
  assert(item, "the arrow is not drawn after scrolling to it");
  await page.click(`.kt-seq-item[data-seq="${item}"] .kt-seq-hit`);
  const pushed = await page.evaluate(() => window.harness.pushedEvents("get_term").map((p) => p.payload.id));
  assert(pushed.includes(target.id), `get_term not pushed for ${target.id}: ${pushed}`);
  await page.waitForSelector(".kt-detail:not([hidden]) .kt-term");
  const detail = await page.textContent(".kt-detail");
  assert(detail.includes("Message") && detail.includes(M.terms[String(target.id)].data), `detail lacks the message: ${detail}`);
  assert(detail.includes("From") && detail.includes("To") && detail.includes(M.pong) && detail.includes("Received"), `detail lacks from/to: ${detail}`);
  assert(await page.$eval(`.kt-seq-item[data-seq="${item}"]`, (g) => g.classList.contains("kt-seq-item-selected")), "arrow not marked selected");
  // the detail belongs to the sequence: hidden on the log tab, back on the sequence tab
  await page.click('[data-tab="log"]');
  assert(await page.isHidden(".kt-detail"), "the sequence's detail shows on the log tab");
  await page.click('[data-tab="sequence"]');
  assert(await page.isVisible(".kt-detail"), "the detail did not come back");
});

await check("the sequence follows live events while scrolled to the end", async () => {
  await page.click('[data-action="follow"]');
  await nextFrame(page);
  const extra = [
    { ...firstPing, id: 9_000_001, data: "{:late, 1}", time: firstPing.time + 1e9 },
    { ...firstPing, id: 9_000_002, kind: "receive", pid: M.pong, peer: null, data: "{:late, 1}", time: firstPing.time + 1e9 + 5 },
  ];
  await emit(page, "events", { events: extra, counters: batches.at(-1).counters });
  await page.waitForTimeout(150);
  await nextFrame(page);
  const last = await page.$$eval(".kt-seq-t-message", (els) => {
    const w = document.getElementById("output").__kinoTrace;
    return els.map((g) => w.sequence.rowAt(Number(g.dataset.seq)).label);
  });
  assert(last.includes("{:late, 1}"), `the new message is not in view: ${last.slice(-3)}`);
});

// "Copy as Mermaid": the ids of the rows in view, measured on the drawn SVG.
const idsOnScreen = (page) =>
  page.evaluate(() => {
    const w = document.getElementById("output").__kinoTrace;
    const box = document.querySelector(".kt-seq-scroll").getBoundingClientRect();
    const header = document.querySelector(".kt-seq-header").getBoundingClientRect();
    const ids = [];
    for (const g of document.querySelectorAll(".kt-seq-item")) {
      const hit = g.querySelector(".kt-seq-hit").getBoundingClientRect();
      if (hit.bottom <= header.bottom + 0.5 || hit.top >= box.bottom - 0.5) continue;
      const row = w.sequence.rowAt(Number(g.dataset.seq));
      for (const e of [row.entry, row.receive, row.ret]) if (e && e.id != null) ids.push(e.id);
    }
    return ids.sort((a, b) => a - b);
  });

await check("Copy as Mermaid: asks for the rows in view, copies the server's diagram, which Mermaid parses", async () => {
  const copyPage = await open(M.connect);
  await copyPage.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: base.replace(/\/$/, "") });
  await answerTerms(copyPage);
  await feed(copyPage);
  await copyPage.evaluate((reply) => window.harness.respond("get_mermaid", () => [["mermaid", reply]]), M.mermaid);
  assert(await copyPage.isHidden('[data-action="copy-mermaid"]'), "Copy as Mermaid shows on the log tab");
  await copyPage.click('[data-tab="sequence"]');
  await copyPage.evaluate(() => {
    const s = document.querySelector(".kt-seq-scroll");
    s.scrollTop = 123 * 30 + 11;
  });
  await nextFrame(copyPage);
  await copyPage.click('[data-action="copy-mermaid"]');
  await copyPage.waitForFunction(() => document.querySelector('[data-action="copy-mermaid"]').textContent.startsWith("Copied"));
  const asked = await copyPage.evaluate(() => window.harness.pushedEvents("get_mermaid").map((p) => p.payload.ids));
  const seen = await idsOnScreen(copyPage);
  assert(asked.length === 1 && seen.length > 10, `asked ${JSON.stringify(asked)}, ${seen.length} ids on screen`);
  assert(JSON.stringify(asked[0]) === JSON.stringify(seen), `asked for ${asked[0]}, rows on screen have ${seen}`);
  const copied = await copyPage.evaluate(() => navigator.clipboard.readText());
  assert(copied === M.mermaid.source, `the clipboard holds ${copied.slice(0, 200)}`);
  const said = await copyPage.textContent('[data-action="copy-mermaid"]');
  assert(/^Copied [\d.,k]+ events$/.test(said) && M.mermaid.events > 1000, `the button says ${said} (${M.mermaid.events} events)`);
  const mermaidPage = await openMermaid(browser, base, errors);
  const problems = await checkDiagrams(mermaidPage, [{ name: "copied diagram", source: copied, texts: ["{:pong, 10}", "KinoTraceTest.SequenceSample.reply/1"] }]);
  assert(problems.length === 0, problems.join("\n"));
  await mermaidPage.context().close();
  await copyPage.context().close();
});

await check("Copy as Mermaid without the clipboard API: a hidden textarea's copy, else the diagram shown selected", async () => {
  const copyPage = await open(M.connect);
  await feed(copyPage);
  await copyPage.evaluate((reply) => {
    window.harness.respond("get_mermaid", () => [["mermaid", reply]]);
    Object.defineProperty(navigator, "clipboard", { value: { writeText: () => Promise.reject(new Error("NotAllowedError")) } });
    window.copied = [];
    window.execCommandWorks = true;
    document.execCommand = (command) => {
      const area = document.activeElement;
      window.copied.push([command, area.value.slice(area.selectionStart, area.selectionEnd)]);
      return window.execCommandWorks;
    };
  }, M.mermaid);
  await copyPage.click('[data-tab="sequence"]');
  await copyPage.click('[data-action="copy-mermaid"]');
  await copyPage.waitForFunction(() => window.copied.length === 1);
  const [[command, text]] = await copyPage.evaluate(() => window.copied);
  assert(command === "copy" && text === M.mermaid.source, "the hidden textarea did not hold the diagram, selected");
  assert(!(await copyPage.$('[data-testid="mermaid-box"]')), "the fallback box shows though the copy worked");

  await copyPage.evaluate(() => (window.execCommandWorks = false));
  await copyPage.click('[data-action="copy-mermaid"]');
  await copyPage.waitForSelector('[data-testid="mermaid-box"] textarea');
  const shown = await copyPage.$eval('[data-testid="mermaid-box"] textarea', (a) => [a.value, a.selectionStart, a.selectionEnd, document.activeElement === a]);
  assert(shown[0] === M.mermaid.source && shown[1] === 0 && shown[2] === shown[0].length && shown[3], `the box shows ${JSON.stringify(shown.slice(1))}`);
  await copyPage.click('[data-action="close-mermaid"]');
  assert(!(await copyPage.$('[data-testid="mermaid-box"]')), "the box did not close");
  await copyPage.context().close();
});

// --- screenshots of the trace widget -----------------------------------------------------

await check("screenshots: sequence and message log", async () => {
  const shot = await open(M.connect, { width: 1180, height: 900, scale: 2 });
  await answerTerms(shot);
  await feed(shot);
  await shot.click('[data-tab="sequence"]');
  await nextFrame(shot);
  // the end of the run: last pings, the stop, the server's name, helper, link and exit
  const seq = await shot.evaluate(() => {
    const w = document.getElementById("output").__kinoTrace;
    for (let s = w.sequence.end - 1; s >= w.sequence.start; s--) {
      const row = w.sequence.rowAt(s);
      if (row.type === "message" && row.label.startsWith("{:ping,")) return s;
    }
    return null;
  });
  await shot.evaluate(() => {
    const s = document.querySelector(".kt-seq-scroll");
    s.scrollTop = s.scrollHeight;
  });
  await nextFrame(shot);
  await shot.click(`.kt-seq-item[data-seq="${seq}"] .kt-seq-hit`);
  await shot.waitForSelector(".kt-detail:not([hidden]) .kt-term");
  await shot.mouse.move(0, 0);
  const out = fixture.screenshots.sequence;
  mkdirSync(path.dirname(out), { recursive: true });
  await shot.locator("#output").screenshot({ path: out });
  console.log(`  screenshot: ${out}`);

  await shot.click('[data-tab="log"]');
  await shot.evaluate(() => {
    const s = document.querySelector(".kt-vlist");
    s.scrollTop = s.scrollHeight;
  });
  await nextFrame(shot);
  await shot.locator("#output").screenshot({ path: fixture.screenshots.messages });
  console.log(`  screenshot: ${fixture.screenshots.messages}`);
});

// --- the stats widget --------------------------------------------------------------------

console.log("stats widget:");
const S = fixture.stats;
const snapshot = S.update.snapshot;
const stats = await open(S.connect, { bundle: "stats-build" });
const tableNames = (page) => page.$$eval(".kt-table > tbody > tr[data-key]", (trs) => trs.map((tr) => tr.dataset.key));

await check("starts from the connect payload, then renders the rows of a real stats session", async () => {
  assert((await stats.textContent(".kt-status")) === "Running", "status is not Running");
  const empty = await stats.isVisible(".kt-stats .kt-empty");
  assert(empty || S.connect.snapshot.rows.length > 0, "no empty state before any call");
  await emit(stats, "snapshot", S.update);
  const names = await tableNames(stats);
  assert(names.length === snapshot.rows.length, `${names.length} rows for ${snapshot.rows.length}`);
  // sorted by time, highest first, as the payload
  assert(JSON.stringify(names) === JSON.stringify(snapshot.rows.map((r) => r.key)), `order ${names} vs ${snapshot.rows.map((r) => r.key)}`);
  const light = snapshot.rows.find((r) => r.key.endsWith(".light/1"));
  const cells = await stats.$$eval(`tr[data-key="${light.key}"] td`, (tds) => tds.map((td) => td.textContent));
  assert(cells[0].includes("light/1") && cells[1] === (light.calls >= 1000 ? `${(light.calls / 1000).toFixed(2).replace(/\.?0+$/, "")}k` : String(light.calls)), `light row ${cells}`);
  const top = snapshot.rows[0];
  const width = await stats.$eval(`tr[data-key="${top.key.replace(/"/g, '\\"')}"] .kt-bar`, (el) => parseFloat(el.style.width)).catch(() => null);
  assert(width != null && Math.abs(width - top.time_share * 100) < 0.2, `top bar ${width}% for share ${top.time_share}`);
  const calls = await stats.textContent('[data-counter="calls"]');
  assert(calls.includes("calls"), `counter ${calls}`);
});

await check("sorts on header click", async () => {
  await stats.click('th[data-key="calls"]');
  const byCalls = await tableNames(stats);
  const expected = snapshot.rows.slice().sort((a, b) => b.calls - a.calls || (a.key < b.key ? -1 : 1)).map((r) => r.key);
  assert(JSON.stringify(byCalls) === JSON.stringify(expected), `by calls ${byCalls} vs ${expected}`);
  await stats.click('th[data-key="calls"]');
  const asc = await tableNames(stats);
  assert(JSON.stringify(asc) === JSON.stringify(snapshot.rows.slice().sort((a, b) => a.calls - b.calls || (a.key < b.key ? -1 : 1)).map((r) => r.key)), `ascending ${asc}`);
  await stats.click('th[data-key="time_us"]');
});

await check("per-process drill-down opens on a row click and survives a refresh", async () => {
  const light = snapshot.rows.find((r) => r.key.endsWith(".light/1"));
  await stats.click(`tr[data-key="${light.key}"] td:first-child`);
  await stats.waitForSelector('[data-testid="drill"]');
  const pids = await stats.$$eval('[data-testid="drill"] > tbody > tr', (trs) => trs.map((tr) => tr.dataset.pid));
  assert(JSON.stringify(pids.slice().sort()) === JSON.stringify(S.workers.slice().sort()), `drill-down pids ${pids} vs workers ${S.workers}`);
  assert(JSON.stringify(pids) === JSON.stringify(light.processes.map((p) => p.pid)), "drill-down not in the payload's order");
  await emit(stats, "snapshot", S.update);
  assert(await stats.isVisible('[data-testid="drill"]'), "drill-down closed on refresh");
});

await check("reset and stop push their events; the stopped widget disables them", async () => {
  await stats.click('[data-action="reset"]');
  await stats.click('[data-action="stop"]');
  const pushed = await stats.evaluate(() => window.harness.pushed.map((p) => p.event));
  assert(JSON.stringify(pushed) === JSON.stringify(["reset", "stop"]), `pushed ${pushed}`);
  await emit(stats, "status", { status: "stopped", snapshot });
  assert((await stats.textContent(".kt-status")) === "Stopped", "status is not Stopped");
  assert(await stats.isDisabled('[data-action="reset"]'), "reset still enabled");
});

await check("screenshot: stats widget with a drill-down", async () => {
  const shot = await open(S.connect, { bundle: "stats-build", width: 1180, height: 700, scale: 2 });
  await emit(shot, "snapshot", S.update);
  const heavy = snapshot.rows[0];
  await shot.click(`tr[data-key="${heavy.key}"] td:first-child`);
  await shot.waitForSelector('[data-testid="drill"]');
  await shot.mouse.move(0, 0);
  await shot.locator("#output").screenshot({ path: fixture.screenshots.stats });
  console.log(`  screenshot: ${fixture.screenshots.stats}`);
});

await finish();
