// Mermaid's own parser and renderer on kino_trace's diagrams, in headless Chromium.
//
//   node test/browser/mermaid.test.mjs DIAGRAMS.json
//
// DIAGRAMS.json ({diagrams: [{name, source, texts, expect}]}) is written by
// test/kino/trace/mermaid_test.exs from real traces and hostile events
// (KinoTraceTest.MermaidSamples). Every diagram must parse and render with `texts` shown,
// except the control cases (`expect: "reject"`), which Mermaid must reject: they prove
// the check fails on a broken diagram. Exits 0 when all is as expected.

import { readFileSync } from "node:fs";
import path from "node:path";
import { root, startServer, launch } from "./support.mjs";
import { openMermaid, checkDiagrams } from "./mermaid.mjs";

const fixturePath = process.argv[2];
if (!fixturePath) {
  console.error("usage: node test/browser/mermaid.test.mjs DIAGRAMS.json");
  process.exit(2);
}
const { diagrams } = JSON.parse(readFileSync(fixturePath, "utf8"));
const { server, base } = await startServer();
const browser = await launch();
const errors = [];
let problems;
try {
  const page = await openMermaid(browser, base, errors);
  const { version } = JSON.parse(readFileSync(path.join(root, "assets/node_modules/mermaid/package.json"), "utf8"));
  console.log(`Mermaid ${version} in Chromium: ${diagrams.length} diagrams`);
  problems = await checkDiagrams(page, diagrams);
} finally {
  await browser.close();
  server.close();
}

const rejected = diagrams.filter((d) => d.expect === "reject").length;
for (const problem of problems) console.log(`  FAIL ${problem}`);
for (const error of errors) console.log(`  page error: ${error}`);
if (problems.length || errors.length) {
  console.log(`${problems.length} problem(s)`);
  process.exit(1);
}
console.log(`${diagrams.length - rejected} diagrams accepted and rendered, ${rejected} broken ones rejected`);
