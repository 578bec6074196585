// Shared by the browser tests: a static server for the committed bundles and the
// harness page, headless Chromium, a widget opener and the check/assert helpers.
//
//   /build/*        lib/assets/trace/build  (Kino.Trace.Widget)
//   /stats-build/*  lib/assets/stats/build  (Kino.Trace.StatsWidget)
//   /smart-cell-build/*  lib/assets/smart_cell/build  (Kino.Trace.SmartCell)
//   /mermaid/*      assets/node_modules/mermaid/dist  (Mermaid's own parser and renderer)
//   /*              test/browser (harness.html, harness.js)

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, "../..");
const require = createRequire(path.join(root, "assets", "package.json"));
const { chromium } = require("playwright-core");

const TYPES = { ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".html": "text/html" };
const BUNDLES = {
  "/build/": "lib/assets/trace/build",
  "/stats-build/": "lib/assets/stats/build",
  "/smart-cell-build/": "lib/assets/smart_cell/build",
  "/mermaid/": "assets/node_modules/mermaid/dist",
};

export async function startServer() {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, "http://localhost");
    const prefix = Object.keys(BUNDLES).find((p) => url.pathname.startsWith(p));
    const file = prefix
      ? path.join(root, BUNDLES[prefix], url.pathname.slice(prefix.length))
      : path.join(here, url.pathname === "/" ? "harness.html" : url.pathname.slice(1));
    try {
      const body = readFileSync(file);
      res.writeHead(200, { "content-type": TYPES[path.extname(file)] || "application/octet-stream" });
      res.end(body);
    } catch {
      res.writeHead(404);
      res.end("not found");
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, base: `http://127.0.0.1:${server.address().port}/` };
}

export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
}

/** Checks with a running failure count. */
// The start every browser test shares: its fixture (the JSON file named on its command
// line, written by its ExUnit test), the static server, Chromium and the checks, with the
// page errors and external loads each opened page reports, and finish(): the check of
// those, then the exit status.
export async function setup(script) {
  const fixturePath = process.argv[2];
  if (!fixturePath) {
    console.error(`usage: node test/browser/${script} PAYLOADS.json`);
    process.exit(2);
  }
  const fixture = JSON.parse(readFileSync(fixturePath, "utf8"));
  const { server, base } = await startServer();
  const browser = await launch();
  const t = checker();
  const errors = [];
  const external = [];
  // the last check (what every opened page reported), then the exit status
  const finish = async () => {
    await t.check("no page errors and no external network loads", async () => {
      assert(errors.length === 0, `page errors: ${errors.join("\n")}`);
      assert(external.length === 0, `external requests: ${external.join(", ")}`);
    });
    await browser.close();
    server.close();
    console.log(t.failures ? `${t.failures} check(s) failed` : "all browser checks passed");
    process.exit(t.failures ? 1 : 0);
  };
  return { fixture, server, base, browser, t, check: t.check, errors, external, finish };
}

export function checker() {
  const state = { failures: 0 };
  state.check = async (name, fn) => {
    try {
      await fn();
      console.log(`  ok  ${name}`);
    } catch (error) {
      state.failures++;
      console.log(`  FAIL ${name}\n       ${String(error && error.stack ? error.stack : error).split("\n").join("\n       ")}`);
    }
  };
  return state;
}

export function assert(condition, message) {
  if (!condition) throw new Error(message);
}

/** Opens the harness page with one widget; page errors and external loads are recorded. */
export async function openWidget(browser, base, data, { width = 1200, height = 900, scale = 1, bundle = "build", errors = [], external = [] } = {}) {
  const context = await browser.newContext({ viewport: { width, height }, deviceScaleFactor: scale });
  const page = await context.newPage();
  page.on("pageerror", (error) => errors.push(String(error)));
  page.on("console", (msg) => msg.type() === "error" && errors.push(msg.text()));
  page.on("request", (request) => {
    if (!request.url().startsWith(base) && !request.url().startsWith("blob:")) external.push(request.url());
  });
  await page.goto(base);
  await page.waitForFunction(() => window.harnessReady === true);
  await page.evaluate(([d, b]) => window.harness.start(d, b), [data, bundle]);
  return page;
}

export const emit = (page, event, payload) => page.evaluate(([e, p]) => window.harness.emit(e, p), [event, payload]);
export const nextFrame = (page) => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
