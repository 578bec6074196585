// Mermaid's own parser and renderer, in a page of the browser tests: checks that
// diagrams are accepted (or, for the checker's own control case, rejected) and that
// their labels render as written.
//
//   const page = await openMermaid(browser, base);
//   const problems = await checkDiagrams(page, [{ name, source, expect: "accept", texts: ["{:ok, 1}"] }]);
//
// Each diagram is parsed with `mermaid.parse`; an accepted one is also rendered with
// `mermaid.render` and every string of `texts` must appear in the SVG's text (so an
// escape that parses but shows the wrong characters fails too). `problems` lists what
// went wrong, one string per diagram; empty when all is well.

/** Opens a page with Mermaid loaded from the test server (/mermaid/, see support.mjs). */
export async function openMermaid(browser, base, errors = []) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  page.on("pageerror", (error) => errors.push(String(error)));
  await page.goto(new URL("mermaid.html", base).href);
  await page.evaluate(async () => {
    const { default: mermaid } = await import("/mermaid/mermaid.esm.min.mjs");
    mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });
    window.mermaid = mermaid;
  });
  return page;
}

/** Parses (and renders) each diagram in the page; returns the problems found. */
export async function checkDiagrams(page, diagrams) {
  return page.evaluate(async (diagrams) => {
    const problems = [];
    let n = 0;
    for (const { name, source, expect = "accept", texts = [] } of diagrams) {
      let error = null;
      try {
        await window.mermaid.parse(source);
      } catch (e) {
        error = String((e && e.message) || e);
      }
      if (expect === "reject") {
        if (!error) problems.push(`${name}: Mermaid accepted a diagram it should reject`);
        continue;
      }
      if (error) {
        problems.push(`${name}: Mermaid rejected it: ${error.split("\n").slice(0, 4).join(" | ")}`);
        continue;
      }
      try {
        const { svg } = await window.mermaid.render(`kt-mermaid-${n++}`, source);
        const holder = document.createElement("div");
        holder.innerHTML = svg;
        const shown = holder.textContent;
        if (/Maximum text size|Syntax error/.test(shown)) problems.push(`${name}: rendered as an error: ${shown.slice(0, 200)}`);
        for (const text of texts) {
          if (!shown.includes(text)) problems.push(`${name}: the rendered diagram lacks ${JSON.stringify(text)}`);
        }
      } catch (e) {
        problems.push(`${name}: Mermaid could not render it: ${String((e && e.message) || e).slice(0, 300)}`);
      }
    }
    return problems;
  }, diagrams);
}
