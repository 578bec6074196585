// @vitest-environment jsdom
import { describe, it, expect } from "vitest";
import { StatsTable, sortStats } from "../src/stats_table.js";

const rows = [
  { mfa: "B.b/0", count: 5, total: 100, mean: 20, max: 50, exceptions: 0 },
  { mfa: "A.a/0", count: 10, total: 50, mean: 5, max: 9, exceptions: 2 },
  { mfa: "C.c/0", count: 1, total: 0, mean: null, max: null, exceptions: 0 },
];

describe("stats table", () => {
  it("sorts numbers descending with nulls last, names ascending", () => {
    expect(sortStats(rows, "count", true).map((r) => r.mfa)).toEqual(["A.a/0", "B.b/0", "C.c/0"]);
    expect(sortStats(rows, "mean", true).map((r) => r.mfa)).toEqual(["B.b/0", "A.a/0", "C.c/0"]);
    expect(sortStats(rows, "mfa", false).map((r) => r.mfa)).toEqual(["A.a/0", "B.b/0", "C.c/0"]);
  });

  it("renders rows and re-sorts on header clicks", () => {
    const parent = document.createElement("div");
    const table = new StatsTable(parent);
    table.render(rows);
    const names = () => [...parent.querySelectorAll("tbody tr td:first-child")].map((td) => td.textContent);
    expect(names()).toEqual(["A.a/0", "B.b/0", "C.c/0"]);
    parent.querySelector('th[data-key="total"]').click();
    expect(names()).toEqual(["B.b/0", "A.a/0", "C.c/0"]);
    parent.querySelector('th[data-key="total"]').click();
    expect(names()).toEqual(["C.c/0", "A.a/0", "B.b/0"]);
    expect(parent.querySelector('th[data-key="total"]').dataset.dir).toBe("asc");
    const cells = [...parent.querySelectorAll("tbody tr")].find((tr) => tr.textContent.includes("A.a/0")).children;
    expect(cells[5].classList.contains("kt-bad")).toBe(true);
    expect(cells[3].textContent).toBe("5 ns");
  });

  // issue 25 items 4 and 5
  it("shows a function by its label with the raw name on hover, an unknown total as –", () => {
    const parent = document.createElement("div");
    const table = new StatsTable(parent);
    const raw = 'Enum."-sum/1-lists^foldl/2-0-"/2';
    table.render([{ mfa: raw, label: "anonymous fn/2 in Enum.sum/1", count: 4, total: null, mean: null, max: null, exceptions: 0 }]);
    const cells = [...parent.querySelectorAll("tbody td")];
    expect(cells.map((td) => td.textContent)).toEqual(["anonymous fn/2 in Enum.sum/1", "4", "–", "–", "–", "0"]);
    expect(cells[0].title).toBe(raw);
    expect(parent.querySelector("tbody .kt-bar")).toBeNull();
  });

  it("shows an empty state", () => {
    const parent = document.createElement("div");
    new StatsTable(parent, { empty: "Nothing." }).render([]);
    expect(parent.querySelector(".kt-empty").hidden).toBe(false);
  });
});
