// The sequence tab draws the pairs the server gives (KinoTrace.Render.Pairs, the rule Mermaid's
// diagrams follow). fixtures/pairs.json is written by test/kino_trace/render/pairs_test.exs: the
// same event sequences as the widget's rows, each with what the Mermaid diagram drew of
// them; the layout must draw as many arrows, found receives, spawns and links.
import { describe, it, expect } from "vitest";
import { readFileSync } from "node:fs";
import { SequenceLayout } from "../src/sequence.js";

const sequences = JSON.parse(readFileSync(new URL("./fixtures/pairs.json", import.meta.url), "utf8"));

function drawn(rows) {
  const counts = { message: 0, found: 0, spawn: 0, link: 0 };
  for (const row of rows) counts[row.type] += 1;
  return counts;
}

describe("pairs, from the server", () => {
  it("has sequences", () => {
    expect(sequences.length).toBeGreaterThan(5);
  });

  for (const { name, rows, drawn: diagram } of sequences) {
    it(`draws what the Mermaid diagram draws: ${name}`, () => {
      const whole = new SequenceLayout();
      whole.append(rows);
      expect(drawn(whole.rowsIn(whole.start, whole.end))).toEqual(diagram);
      // one event at a time, as a running trace's come
      const live = new SequenceLayout();
      for (const row of rows) live.append([row]);
      expect(drawn(live.rowsIn(live.start, live.end))).toEqual(diagram);
    });
  }

  it("a paired send and receive are one arrow whichever came first, with both events", () => {
    const [receive, send] = sequences.find((s) => s.name === "receive a little before its send").rows;
    const layout = new SequenceLayout();
    layout.append([receive, send]);
    expect(layout.rowAt(0)).toMatchObject({ type: "message", entry: send, receive });
    expect(layout.lanes[layout.rowAt(0).from].key).toBe(send.pid);
  });

  it("a spawn seen after its spawned is one arrow, from the parent to the child", () => {
    const [spawned, spawn] = sequences.find((s) => s.name === "spawned, then spawn").rows;
    const layout = new SequenceLayout();
    layout.append([spawned, spawn]);
    const row = layout.rowAt(0);
    expect(layout.end).toBe(1);
    expect([layout.lanes[row.from].key, layout.lanes[row.to].key]).toEqual([spawn.pid, spawned.pid]);
    expect(row.label).toBe("spawn Enum.sum/1"); // the payload's spawn_mfa, rendered by the server
  });
});
