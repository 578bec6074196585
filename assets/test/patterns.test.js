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

  it("with quietMs, the line being typed is marked only once typing pauses with no list open, or the cursor leaves it", () => {
    vi.useFakeTimers();
    try {
      const parent = document.createElement("div");
      document.body.replaceChildren(parent);
      const editor = new PatternEditor(parent, { onApply: vi.fn(), onComplete: vi.fn(), quietMs: 1000 });
      const { textarea } = editor;
      const errors = () => [...parent.querySelectorAll(".kt-editor-line")].map((l) => l.classList.contains("kt-line-error"));
      const type = (value) => {
        textarea.value = value;
        textarea.setSelectionRange(value.length, value.length);
        textarea.dispatchEvent(new Event("input"));
      };
      const check = (lines) =>
        editor.showResults({ patterns: [], results: lines.map((input) => ({ input, ok: input.endsWith("/1"), error: input.endsWith("/1") ? null : `bad ${input}` })) });
      textarea.focus();

      // half typed, the completion list open: the server's check marks nothing yet
      type("A.b/1\nEnum.su");
      editor.showCompletions({ seq: editor.completion.seq, prefix: "su", items: [{ label: "sum/1", insert: "sum/1", kind: "function", detail: "Enum.sum/1" }] });
      expect(editor.completion.open).toBe(true);
      check(["A.b/1", "Enum.su"]);
      expect(errors()).toEqual([false, false]);
      expect(parent.querySelector(".kt-editor-messages").textContent).toBe("");
      vi.advanceTimersByTime(5000);
      expect(errors()).toEqual([false, false]);

      // the list closes (Escape) and typing pauses: now it is marked
      textarea.dispatchEvent(new KeyboardEvent("keydown", { key: "Escape", bubbles: true, cancelable: true }));
      expect(editor.completion.open).toBe(false);
      vi.advanceTimersByTime(999);
      expect(errors()).toEqual([false, true]);
      expect(parent.querySelector(".kt-editor-messages").textContent).toContain("bad Enum.su");

      // typing again: unmarked; the cursor leaving the line marks it at once
      type("A.b/1\nEnum.s");
      check(["A.b/1", "Enum.s"]);
      expect(errors()).toEqual([false, false]);
      textarea.setSelectionRange(0, 0);
      textarea.dispatchEvent(new KeyboardEvent("keyup", { key: "ArrowUp" }));
      expect(errors()).toEqual([false, true]);

      // another line with an error stays marked while this one is typed
      type("A.x\nEnum.s");
      check(["A.x", "Enum.s"]);
      expect(errors()).toEqual([true, false]);
      // leaving the field marks it too
      textarea.blur();
      expect(errors()).toEqual([true, true]);
    } finally {
      vi.useRealTimers();
    }
  });
});
