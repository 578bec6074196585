import { describe, it, expect } from "vitest";
import { formatDuration, formatCount, formatRate, formatTime, entryLine, entryOutcome, entryText, callerText } from "../src/format.js";

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

  it("a call's caller, with the file and line of the call when recorded, follows it in a text line", () => {
    const entry = { time: 1_700_000_000_000_001, pid: "#PID<0.1.0>", depth: 0, kind: "call", call: "M.f(1)", caller: "C.run/0 at lib/c.ex:7" };
    expect(callerText(entry)).toBe("from C.run/0 at lib/c.ex:7");
    expect(entryLine(entry)).toMatch(/ M\.f\(1\) \(from C\.run\/0 at lib\/c\.ex:7\)$/);
    expect(callerText({ kind: "call", call: "M.f(1)", caller: null })).toBe("");
  });

  it("a return_to event reads as where the process returned into", () => {
    expect(entryText({ kind: "return_to", mfa: "MyApp.run/0" })).toBe("return to MyApp.run/0");
    expect(entryText({ kind: "return_to", mfa: null })).toBe("return to (no function)");
  });

  it("a text line has time, process, indented call, outcome and duration", () => {
    const line = entryLine({ time: 1_700_000_000_000_001, pid: "#PID<0.1.0>", depth: 2, call: "M.f(1)", result: ":ok", duration: 2_000 });
    expect(line).toMatch(/^\d\d:\d\d:\d\d\.000001 #PID<0\.1\.0>     M\.f\(1\) -> :ok \(2 µs\)$/);
    expect(entryOutcome({ exception: "** (ArgumentError) x", result: null })).toBe("** (ArgumentError) x");
  });
});

import { kindLook, entryText, entryOutcome, whoWithNode, isMessageKind, isNormalExit, eventBody } from "../src/format.js";

describe("message and process events", () => {
  it("every kind has a look; calls have none", () => {
    for (const kind of ["send", "send_to_non_existing", "receive", "timeout", "spawn", "spawned", "exit", "link", "unlink", "getting_linked", "getting_unlinked", "register", "unregister"]) {
      const look = kindLook(kind);
      expect(look.icon.length).toBeGreaterThan(0);
      expect(look.label.length).toBeGreaterThan(0);
      expect(isMessageKind(kind)).toBe(true);
    }
    expect(kindLook("call")).toBe(null);
    expect(isMessageKind("call") || isMessageKind("return") || isMessageKind("return_to")).toBe(false);
  });

  it("an after timeout (timeouts: true) shows as what it is, with no message", () => {
    const e = { kind: "timeout", pid: "#PID<0.1.0>", data: null, peer: null };
    expect(entryText(e)).toBe("after timeout");
    expect(entryOutcome(e)).toBe("");
  });

  it("a send shows its message and → receiver (by name when known)", () => {
    const e = { kind: "send", pid: "#PID<0.1.0>", data: "{:ping, 1}", peer: "#PID<0.2.0>", peer_name: "pong" };
    expect(eventBody(e)).toBe("{:ping, 1}");
    expect(entryText(e)).toBe("send {:ping, 1}");
    expect(entryOutcome(e)).toBe("→ pong");
    expect(entryOutcome({ ...e, peer_name: null })).toBe("→ #PID<0.2.0>");
    expect(entryOutcome({ kind: "receive", data: ":x" })).toBe("");
    expect(eventBody({ kind: "link", peer: "#PID<0.3.0>" })).toBe("#PID<0.3.0>");
  });

  it("remote events name their node in the process column", () => {
    expect(whoWithNode({ pid: "#PID<123.94.0>", node: "b@host", remote: true })).toBe("#PID<123.94.0> @ b@host");
    expect(whoWithNode({ pid: "#PID<0.94.0>", node: "a@host", remote: false, name: "cache" })).toBe("cache");
  });

  it("normal exits are told from crashes", () => {
    expect(isNormalExit(":normal")).toBe(true);
    expect(isNormalExit("{:shutdown, :done}")).toBe(true);
    expect(isNormalExit(":killed")).toBe(false);
  });
});
