// @vitest-environment jsdom
import { describe, it, expect, vi } from "vitest";
import { parsePatternLines, matchResults, PatternEditor } from "../src/patterns.js";

describe("patterns", () => {
  it("parses one pattern per line, skipping blanks and comments, keeping line numbers", () => {
    expect(parsePatternLines("A.b/1\n\n  # off\n  C.d  \r\nE")).toEqual([
      { line: 0, pattern: "A.b/1" },
      { line: 3, pattern: "C.d" },
      { line: 4, pattern: "E" },
    ]);
  });

  it("pairs results with lines in order, or by text when the order does not fit", () => {
    const lines = parsePatternLines("A\n\nB");
    const results = [{ input: "A", ok: true }, { input: "B", ok: false, error: "bad" }];
    expect(matchResults(lines, results).get(2).error).toBe("bad");
    expect(matchResults(lines, [results[1]]).get(2).error).toBe("bad");
    expect(matchResults(lines, [results[1]]).has(0)).toBe(false);
  });

  it("the editor applies its lines and marks bad ones with the server's message", () => {
    const parent = document.createElement("div");
    const onApply = vi.fn();
    const editor = new PatternEditor(parent, { patterns: ["A.b/1"], onApply });
    editor.textarea.value = "A.b/1\nA.nope/1";
    editor.applyButton.click();
    expect(onApply).toHaveBeenCalledWith(["A.b/1", "A.nope/1"]);

    editor.showResults({ patterns: ["A.b/1"], results: [{ input: "A.b/1", ok: true }, { input: "A.nope/1", ok: false, error: "no A.nope/1" }] });
    const marked = [...parent.querySelectorAll(".kt-editor-line")].map((l) => l.classList.contains("kt-line-error"));
    expect(marked).toEqual([false, true]);
    expect(parent.querySelector(".kt-editor-messages").textContent).toContain("line 2");
    expect(parent.querySelector(".kt-editor-messages").textContent).toContain("no A.nope/1");

    // editing clears the marks
    editor.textarea.dispatchEvent(new Event("input"));
    expect(parent.querySelectorAll(".kt-line-error").length).toBe(0);
  });

  it("the editor shows an edit refused as a whole", () => {
    const parent = document.createElement("div");
    const editor = new PatternEditor(parent, { patterns: [], onApply: vi.fn() });
    editor.textarea.value = "A.b/1";
    editor.applyButton.click();

    editor.showResults({ patterns: [], results: [], error: "not applied: too many patterns" });
    expect(editor.note.textContent).toBe("Not applied");
    expect(editor.note.classList.contains("kt-bad")).toBe(true);
    expect(parent.querySelector(".kt-editor-messages .kt-error").textContent).toBe("not applied: too many patterns");

    editor.textarea.dispatchEvent(new Event("input"));
    expect(parent.querySelectorAll(".kt-editor-messages .kt-error").length).toBe(0);
  });

  it("offers completions only when given onComplete; Ctrl+Enter still applies while the list is open", () => {
    const plain = document.createElement("div");
    new PatternEditor(plain, { onApply: vi.fn() }).showCompletions({ seq: 1, prefix: "", items: [] });
    expect(plain.querySelector(".kt-complete")).toBe(null);

    const parent = document.createElement("div");
    document.body.replaceChildren(parent);
    const onApply = vi.fn();
    const onComplete = vi.fn();
    const editor = new PatternEditor(parent, { onApply, onComplete });
    editor.textarea.focus();
    editor.textarea.value = "Enum.ma";
    editor.textarea.dispatchEvent(new Event("input"));
    expect(onComplete).toHaveBeenCalledWith("Enum.ma", 1);
    editor.showCompletions({ seq: 1, prefix: "ma", items: [{ label: "map/2", insert: "map/2", kind: "function", detail: "Enum.map/2" }] });
    expect(parent.querySelector(".kt-complete").hidden).toBe(false);
    editor.textarea.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", ctrlKey: true, bubbles: true, cancelable: true }));
    expect(onApply).toHaveBeenCalledWith(["Enum.ma"]);
  });
});
