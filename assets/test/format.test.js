import { describe, it, expect } from "vitest";
import { formatDuration, formatCount, formatRate, formatTime, entryLine, entryOutcome } from "../src/format.js";

describe("format", () => {
  it("durations keep three significant digits", () => {
    expect(formatDuration(950)).toBe("950 ns");
    expect(formatDuration(494.775)).toBe("495 ns");
    expect(formatDuration(1_500)).toBe("1.5 µs");
    expect(formatDuration(38_000)).toBe("38 µs");
    expect(formatDuration(123_456_789)).toBe("123 ms");
    expect(formatDuration(2_000_000_000)).toBe("2 s");
    expect(formatDuration(null)).toBe("");
  });

  it("counts and rates are compact", () => {
    expect(formatCount(999)).toBe("999");
    expect(formatCount(12_345)).toBe("12.3k");
    expect(formatCount(1_500_000)).toBe("1.5M");
    expect(formatRate(0)).toBe("0/s");
    expect(formatRate(2.25)).toBe("2.3/s");
    expect(formatRate(15_000)).toBe("15k/s");
  });

  it("times show microseconds", () => {
    expect(formatTime(1_700_000_000_123_456)).toMatch(/^\d\d:\d\d:\d\d\.123456$/);
  });

  it("a text line has time, process, indented call, outcome and duration", () => {
    const line = entryLine({ time: 1_700_000_000_000_001, pid: "#PID<0.1.0>", depth: 2, call: "M.f(1)", result: ":ok", duration: 2_000 });
    expect(line).toMatch(/^\d\d:\d\d:\d\d\.000001 #PID<0\.1\.0>     M\.f\(1\) → :ok \(2 µs\)$/);
    expect(entryOutcome({ exception: "** (ArgumentError) x", result: null })).toBe("** (ArgumentError) x");
  });
});
