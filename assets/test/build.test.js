import { describe, it, expect } from "vitest";
import * as esbuild from "esbuild";
import { readFileSync } from "node:fs";
import path from "node:path";
import { builds } from "../build.config.js";

describe("committed builds", () => {
  for (const [options, outdir] of builds) {
    it(`${path.relative(path.join(outdir, "../../../.."), outdir)} matches the sources (run \`npm run build\` in assets/ after editing src/)`, async () => {
      const result = await esbuild.build({ ...options, write: false, logLevel: "silent" });
      expect(result.outputFiles.map((f) => path.basename(f.path)).sort()).toEqual(["main.css", "main.js"]);
      for (const file of result.outputFiles) {
        const committed = readFileSync(path.join(outdir, path.basename(file.path)), "utf8");
        expect(committed === file.text, `${path.basename(file.path)} is stale`).toBe(true);
      }
    });
  }
});
