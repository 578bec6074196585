// Bundles the widget into lib/assets/trace/build/ (main.js + main.css), the directory
// Kino.Trace.Widget reads with `use Kino.JS, assets_path: ...`. The build output is
// committed, so users and CI need no Node.js. `node build.mjs --watch` rebuilds on change.
import * as esbuild from "esbuild";
import { buildOptions } from "./build.config.js";

if (process.argv.includes("--watch")) {
  const context = await esbuild.context(buildOptions);
  await context.watch();
} else {
  await esbuild.build(buildOptions);
}
