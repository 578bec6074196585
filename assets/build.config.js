// esbuild options of the widget bundles, shared by build.mjs and the test that checks the
// committed builds are up to date. Kino.JS reads one directory per widget module
// (`use Kino.JS, assets_path: ...`) and loads its `main.js`, so each widget has its own:
//
//   lib/assets/trace/build/main.{js,css}   Kino.Trace.Widget       (src/main.js, src/main.css)
//   lib/assets/stats/build/main.{js,css}   Kino.Trace.StatsWidget  (src/stats_main.js, src/stats.css)
//   lib/assets/smart_cell/build/main.{js,css}  Kino.Trace.SmartCell  (src/smart_cell_main.js, src/smart_cell.css)
//
// Both are built from the same sources: the stats table renderer and the shared styles
// (src/base.css) are one module each, bundled into both.
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const src = (file) => path.join(here, "src", file);

/** Where `use Kino.JS, assets_path: "lib/assets/trace/build"` reads the bundle. */
export const outdir = path.join(here, "..", "lib", "assets", "trace", "build");

/** Where `use Kino.JS, assets_path: "lib/assets/stats/build"` reads the stats bundle. */
export const statsOutdir = path.join(here, "..", "lib", "assets", "stats", "build");

const common = {
  bundle: true,
  format: "esm",
  target: ["es2020"],
  minify: true,
  legalComments: "none",
  logLevel: "info",
};

export const buildOptions = {
  ...common,
  entryPoints: [src("main.js"), src("main.css")],
  outdir,
};

export const statsBuildOptions = {
  ...common,
  entryPoints: [
    { in: src("stats_main.js"), out: "main" },
    { in: src("stats.css"), out: "main" },
  ],
  outdir: statsOutdir,
};

/** Where `use Kino.JS, assets_path: "lib/assets/smart_cell/build"` reads the smart cell's bundle. */
export const smartCellOutdir = path.join(here, "..", "lib", "assets", "smart_cell", "build");

export const smartCellBuildOptions = {
  ...common,
  entryPoints: [
    { in: src("smart_cell_main.js"), out: "main" },
    { in: src("smart_cell.css"), out: "main" },
  ],
  outdir: smartCellOutdir,
};

/** Every bundle: [options, output directory]. */
export const builds = [
  [buildOptions, outdir],
  [statsBuildOptions, statsOutdir],
  [smartCellBuildOptions, smartCellOutdir],
];
