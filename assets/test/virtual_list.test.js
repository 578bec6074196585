import { describe, it, expect } from "vitest";
import { visibleRange } from "../src/virtual_list.js";

describe("visibleRange", () => {
  it("covers the viewport plus a margin", () => {
    expect(visibleRange(0, 240, 24, 100_000, 8)).toEqual({ first: 0, last: 18 });
    expect(visibleRange(24 * 50_000, 240, 24, 100_000, 8)).toEqual({ first: 49_992, last: 50_018 });
  });

  it("clamps at the end and when the list shrank under an old scroll position", () => {
    expect(visibleRange(24 * 99_995, 240, 24, 100_000, 8).last).toBe(100_000);
    expect(visibleRange(5_000, 240, 24, 8, 8)).toEqual({ first: 0, last: 8 });
    expect(visibleRange(100, 240, 24, 0, 8)).toEqual({ first: 0, last: 0 });
  });
});
