// @vitest-environment jsdom
// The calls tab draws a bounded number of calls however many there are: the latest of an
// open process, none of a closed one until it is opened (issue 25, tab switch under load).
import { describe, it, expect } from "vitest";
import { CallTree, latestCalls, SHOWN_PER_PROCESS } from "../src/call_tree.js";

const node = (n, children = []) => ({ entry: { id: n, call: `M.f(${n})`, kind: "call" }, children });

describe("CallTree", () => {
  it("latestCalls keeps the latest calls, whole trees from the end, and counts the rest", () => {
    const roots = [node(1, [node(2), node(3)]), node(4, [node(5, [node(6)])]), node(7)];
    const { shown, hidden } = latestCalls(roots, 4);
    const ids = (ns) => ns.map((n) => [n.entry.id, ids(n.children)]);
    expect(ids(shown)).toEqual([[4, [[5, [[6, []]]]]], [7, []]]);
    expect(hidden).toBe(3);
    expect(latestCalls(roots, 100).hidden).toBe(0);
  });

  it("draws at most SHOWN_PER_PROCESS calls of an open process, and a closed one's when opened", () => {
    const parent = document.createElement("div");
    const tree = new CallTree(parent);
    const many = Array.from({ length: 5000 }, (_, i) => node(i));
    const trees = [1, 2, 3, 4].map((p) => ({ pid: `#PID<0.${p}.0>`, label: `#PID<0.${p}.0>`, roots: many }));
    tree.render(trees);
    const sections = [...parent.querySelectorAll(".kt-tree-process")];
    expect(sections.map((s) => s.querySelectorAll(".kt-tree-line").length)).toEqual([SHOWN_PER_PROCESS, SHOWN_PER_PROCESS, SHOWN_PER_PROCESS, 0]);
    expect(sections[0].querySelector(".kt-tree-more").textContent).toBe(`${5000 - SHOWN_PER_PROCESS} earlier calls not shown (the Log tab has them)`);
    expect(sections[0].querySelector("summary").textContent).toContain("5000 calls");
    sections[3].open = true;
    sections[3].dispatchEvent(new Event("toggle"));
    expect(sections[3].querySelectorAll(".kt-tree-line").length).toBe(SHOWN_PER_PROCESS);
  });
});
