import { describe, it, expect } from "vitest";
import * as esbuild from "esbuild";
import { readFileSync } from "node:fs";
import path from "node:path";
import { buildOptions, outdir } from "../build.config.js";

describe("committed build", () => {
  it("matches the sources (run `npm run build` in assets/ after editing src/)", async () => {
    const result = await esbuild.build({ ...buildOptions, write: false, logLevel: "silent" });
    expect(result.outputFiles.length).toBe(2);
    for (const file of result.outputFiles) {
      const committed = readFileSync(path.join(outdir, path.basename(file.path)), "utf8");
      expect(committed === file.text, `${path.basename(file.path)} is stale`).toBe(true);
    }
  });
});
