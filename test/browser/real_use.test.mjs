// Browser test of what a Livebook user saw go wrong (issue 23 items 4 and 5), in real
// headless Chromium, on payloads from real traces:
//
//   node test/browser/real_use.test.mjs PAYLOADS.json
//
// PAYLOADS.json is written by test/kino/trace/widget/browser_test.exs through the real
// KinoTrace.Widget.Controller:
//   replies.untraced  Kino.Trace.messages([:counter]) on a named Agent, called twice by a
//                     process not traced (each reply goes to an alias, a reference)
//   replies.traced    the same with the caller traced too
//   structs           calls taking a struct with more fields than :max_items, of a
//                     module this node has and of one it does not
// Exits 0 when every check passes.

import { assert, openWidget, emit, nextFrame, setup } from "./support.mjs";

const { fixture, base, browser, check, errors, external, finish } = await setup("real_use.test.mjs");

async function opened(data) {
  const page = await openWidget(browser, base, data.connect, { errors, external });
  for (const batch of data.batches) await emit(page, "events", batch);
  await nextFrame(page);
  return page;
}

// The sequence tab as drawn: its lanes (pid and centre) and its message arrows.
async function sequence(page) {
  await page.click('[data-tab="sequence"]');
  await page.evaluate(() => (document.querySelector(".kt-seq-scroll").scrollTop = 0));
  await nextFrame(page);
  const lanes = await page.$$eval(".kt-seq-lane", (els) => els.map((e) => ({ pid: e.dataset.pid, x: e.offsetLeft + e.offsetWidth / 2 })));
  const arrows = await page.$$eval(".kt-seq-t-message", (els) =>
    els.map((g) => {
      const row = document.getElementById("output").__kinoTrace.sequence.rowAt(Number(g.dataset.seq));
      return {
        label: row.label,
        received: !!row.receive,
        pending: g.querySelector("line").classList.contains("kt-seq-pending"),
        x1: Number(g.querySelector("circle").getAttribute("cx")),
        x2: Number(g.querySelector("line").getAttribute("x2")),
      };
    })
  );
  return { lanes, arrows };
}

for (const [which, R] of Object.entries(fixture.replies)) {
  console.log(`GenServer replies, caller ${which === "traced" ? "traced too" : "not traced"}:`);
  const page = await opened(R);

  await check("one lane per process: the agent and its caller, none for a reply's alias", async () => {
    const { lanes } = await sequence(page);
    const pids = lanes.map((l) => l.pid).sort();
    // a traced caller also tells the test process it is done
    const expected = (which === "traced" ? [R.agent, R.caller, R.parent] : [R.agent, R.caller]).sort();
    assert(JSON.stringify(pids) === JSON.stringify(expected), `lanes ${JSON.stringify(pids)}, expected ${JSON.stringify(expected)} (agent ${R.agent}, caller ${R.caller})`);
  });

  await check("each reply is an arrow from the agent's lane to the caller's", async () => {
    const { lanes, arrows } = await sequence(page);
    const x = Object.fromEntries(lanes.map((l) => [l.pid, l.x]));
    const replies = arrows.filter((a) => a.label.startsWith("reply "));
    assert(replies.length === 2, `${replies.length} reply arrows: ${JSON.stringify(arrows)}`);
    for (const r of replies) {
      assert(Math.abs(r.x1 - x[R.agent]) < 1 && Math.abs(r.x2 - x[R.caller]) < 12, `reply ${r.label} drawn ${r.x1}→${r.x2}; agent at ${x[R.agent]}, caller at ${x[R.caller]}`);
      // received when the caller is traced; otherwise it cannot be seen received
      if (which === "traced") assert(r.received && !r.pending, `reply ${r.label} not paired with the caller's receive`);
    }
    if (which === "traced") {
      // only the :go from the test process (not traced) is a receive without its send
      const found = await page.$$eval(".kt-seq-t-found", (els) => els.map((g) => document.getElementById("output").__kinoTrace.sequence.rowAt(Number(g.dataset.seq)).label));
      assert(JSON.stringify(found) === JSON.stringify([":go"]), `receives drawn on their own (their sends not matched): ${JSON.stringify(found)}`);
    }
  });
  await check("calls and replies read by what they carry, as in Mermaid (issue 39 item 8)", async () => {
    const { arrows } = await sequence(page);
    // (a call whose send is not traced is drawn as a receive on its own)
    const found = await page.$$eval(".kt-seq-t-found", (els) => els.map((g) => document.getElementById("output").__kinoTrace.sequence.rowAt(Number(g.dataset.seq)).label));
    const labels = arrows.map((a) => a.label).concat(found);
    const calls = labels.filter((l) => l.startsWith("call {:get, #Function<"));
    assert(calls.length === 2, `${calls.length} call arrows: ${JSON.stringify(labels)}`);
    const replies = labels.filter((l) => l.startsWith("reply ")).sort();
    assert(JSON.stringify(replies) === JSON.stringify(["reply 0", "reply 1"]), `replies read ${JSON.stringify(replies)}`);
    assert(!labels.some((l) => l.includes("$gen_call") || l.includes("#Reference<")), `an envelope shows: ${JSON.stringify(labels)}`);
    for (const label of ["reply 0", "reply 1"]) assert(R.mermaid.includes(`: ${label}\n`), `Mermaid has no arrow "${label}":\n${R.mermaid}`);
  });

  await check("a reply's details show the raw message (issue 39 item 8)", async () => {
    await page.evaluate((terms) => {
      window.harness.respond("get_term", ({ id }) => [["term", terms[String(id)] || { id, error: "unknown" }]]);
    }, R.terms);
    await page.click('[data-tab="log"]');
    await page.fill(".kt-filter", "reply 0");
    await nextFrame(page);
    await page.click(".kt-vlist .kt-row >> nth=0");
    await page.waitForFunction(() => {
      const d = document.querySelector(".kt-detail:not([hidden])");
      return d && d.textContent.includes("[:alias |");
    }, null, { timeout: 5000 }).catch(() => null);
    const detail = await page.textContent(".kt-detail");
    assert(/\{\[:alias \| #Reference<[^>]*>\], 0\}/.test(detail), `the details lack the raw reply: ${detail}`);
    await page.click(".kt-close");
    await page.fill(".kt-filter", "");
  });

  await check("the agent's lane reads its name as Elixir and Mermaid write it (issue 39 item 7)", async () => {
    await sequence(page);
    const names = await page.$$eval(".kt-seq-lane-name", (els) => els.map((e) => e.textContent));
    assert(names.includes(R.agent_name), `lanes ${JSON.stringify(names)}, none reads ${R.agent_name}`);
    assert(!names.some((n) => n.startsWith("Elixir.")), `a lane reads Elixir.: ${JSON.stringify(names)}`);
    assert(R.mermaid.includes(` as ${R.agent_name}\n`), `Mermaid names the agent otherwise:\n${R.mermaid}`);
  });
}

const S = fixture.structs;
console.log("cut structs:");
const page = await opened(S);
await page.evaluate((terms) => {
  window.harness.respond("get_term", ({ id }) => [["term", terms[String(id)] || { id, error: "unknown" }]]);
}, S.terms);

await check("each row shows the struct, cut, as Elixir code", async () => {
  const texts = await page.$$eval(".kt-vlist .kt-row .kt-c-text", (els) => els.map((e) => e.textContent));
  for (const shown of S.shown) {
    const call = `KinoTraceTest.CutStruct.take(${shown})`;
    assert(texts.includes(call), `no row reads ${call}: ${JSON.stringify(texts)}`);
  }
  assert(!texts.some((t) => t.includes("Inspect.Error")), `a row reads Inspect.Error: ${JSON.stringify(texts)}`);
});

await check("the details pane shows the struct, cut", async () => {
  for (const shown of S.shown) {
    const call = `KinoTraceTest.CutStruct.take(${shown})`;
    await page.locator(".kt-vlist .kt-row .kt-c-text", { hasText: call }).first().click();
    await page.waitForFunction((text) => {
      const d = document.querySelector(".kt-detail:not([hidden])");
      return d && d.querySelector(".kt-term") && d.textContent.replace(/\s+/g, " ").includes(text);
    }, shown, { timeout: 5000 }).catch(() => null);
    const detail = await page.textContent(".kt-detail");
    assert(detail.replace(/\s+/g, " ").includes(shown), `details of ${call}: ${detail}`);
    assert(!detail.includes("Inspect.Error"), `details of ${call} read Inspect.Error: ${detail}`);
  }
});

// --- issue 23 item 2: stats(["Enum"]) beside its own busy stats widget --------------------
console.log("stats of Enum beside the stats widget itself:");
{
  const S = fixture.stats;
  const stats = await openWidget(browser, base, S.connect, { errors, external, bundle: "stats-build" });
  await emit(stats, "snapshot", S.update);

  await check("the user's Enum.map/2 calls are counted, in the user's process", async () => {
    await stats.click('tr[data-key="Enum.map/2"] td:first-child');
    await stats.waitForSelector('[data-testid="drill"]');
    const pids = await stats.$$eval('[data-testid="drill"] > tbody > tr', (trs) => trs.map((tr) => tr.dataset.pid));
    assert(pids.includes(S.user), `Enum.map/2 drill-down ${pids} lacks the user's ${S.user}`);
  });

  await check("two functions the compiler made in one function read apart, their raw names on hover (issue 39 item 10)", async () => {
    const cells = await stats.$$eval(".kt-table > tbody > tr[data-key]", (trs) => trs.map((tr) => ({ key: tr.dataset.key, name: tr.querySelector("td").textContent, title: tr.querySelector("td").title })));
    const reduce = cells.filter((c) => c.name.startsWith("anonymous fn/3 in Enum.reduce/3"));
    assert(reduce.length >= 2, `Enum.reduce/3's functions: ${JSON.stringify(cells)}`);
    const names = cells.map((c) => c.name);
    assert(new Set(names).size === names.length, `rows read alike: ${JSON.stringify(names)}`);
    for (const c of cells.filter((c) => c.name !== c.key)) assert(c.title === c.key, `${c.name}: hover ${JSON.stringify(c.title)}, raw ${c.key}`);
  });

  await check("no row counts a call of the stats widget's own process", async () => {
    const keys = await stats.$$eval(".kt-table > tbody > tr[data-key]", (trs) => trs.map((tr) => tr.dataset.key));
    assert(keys.length === S.update.snapshot.rows.length, `${keys.length} rows for ${S.update.snapshot.rows.length}`);
    for (const key of keys) {
      await stats.click(`tr[data-key="${key.replace(/"/g, '\\"')}"] td:first-child`);
      await stats.waitForSelector('[data-testid="drill"]');
      const pids = await stats.$$eval('[data-testid="drill"] > tbody > tr', (trs) => trs.map((tr) => tr.dataset.pid));
      assert(!pids.includes(S.widget), `${key} counts the widget's own process ${S.widget}: ${pids}`);
    }
  });
}

await finish();
