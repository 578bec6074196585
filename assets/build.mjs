// Bundles the widgets into lib/assets/*/build/ (main.js + main.css each), the directories
// Kino.Trace.Widget and Kino.Trace.StatsWidget read with `use Kino.JS, assets_path: ...`
// (see build.config.js). The build output is committed, so users and CI need no Node.js.
// `node build.mjs --watch` rebuilds on change.
import * as esbuild from "esbuild";
import { builds } from "./build.config.js";

if (process.argv.includes("--watch")) {
  for (const [options] of builds) {
    const context = await esbuild.context(options);
    await context.watch();
  }
} else {
  for (const [options] of builds) await esbuild.build(options);
}
