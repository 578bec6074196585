// esbuild options of the widget bundle, shared by build.mjs and the test that checks the
// committed build is up to date.
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));

/** Where `use Kino.JS, assets_path: "lib/assets/trace/build"` reads the bundle. */
export const outdir = path.join(here, "..", "lib", "assets", "trace", "build");

export const buildOptions = {
  entryPoints: [path.join(here, "src", "main.js"), path.join(here, "src", "main.css")],
  outdir,
  bundle: true,
  format: "esm",
  target: ["es2020"],
  minify: true,
  legalComments: "none",
  logLevel: "info",
};
