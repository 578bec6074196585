// @vitest-environment jsdom
import { describe, it, expect, vi, beforeEach } from "vitest";
import { CompletionList, CompleteDropdown, applyCompletion, lineBefore } from "../src/complete_dropdown.js";

// Items as KinoTrace.Complete sends them (kind as JSON has it).
const fetches = [
  { label: "fetch/1", insert: "fetch/1", kind: "function", detail: "SampleApp.Cache.fetch/1" },
  { label: "fetch/2", insert: "fetch/2", kind: "function", detail: "SampleApp.Cache.fetch/2" },
  { label: "fetch_all/2", insert: "fetch_all/2", kind: "function", detail: "SampleApp.Cache.fetch_all/2" },
];

describe("lineBefore and applyCompletion", () => {
  it("the current line up to the cursor", () => {
    expect(lineBefore("Enum.map/2\n:ets.ins", 19)).toBe(":ets.ins");
    expect(lineBefore("Enum.map/2\n:ets.ins", 4)).toBe("Enum");
    expect(lineBefore("", 0)).toBe("");
  });

  it("replaces the prefix before the cursor, leaving the rest of the text", () => {
    expect(applyCompletion("A\n:ets.ins\nB", 10, "ins", "insert/2")).toEqual({ value: "A\n:ets.insert/2\nB", cursor: 15 });
    expect(applyCompletion("Enum.map(", 9, "", "_, _)")).toEqual({ value: "Enum.map(_, _)", cursor: 14 });
    // unicode before the cursor: lengths are the browser's own
    expect(applyCompletion("é日本.Ca", 6, "Ca", "Cache")).toEqual({ value: "é日本.Cache", cursor: 9 });
    // a prefix that is not there: inserted at the cursor
    expect(applyCompletion("Enum.x", 6, "ma", "map/2")).toEqual({ value: "Enum.xmap/2", cursor: 11 });
  });
});

describe("CompletionList: the keyboard", () => {
  it("does nothing while closed", () => {
    const list = new CompletionList();
    for (const key of ["ArrowDown", "ArrowUp", "Enter", "Tab", "Escape"]) expect(list.key({ key })).toBe(null);
  });

  it("Down and Up move the selection, wrapping around", () => {
    const list = new CompletionList();
    list.set(fetches, "fe");
    expect(list.selected.label).toBe("fetch/1");
    expect(list.key({ key: "ArrowDown" })).toBe("move");
    expect(list.key({ key: "ArrowDown" })).toBe("move");
    expect(list.selected.label).toBe("fetch_all/2");
    list.key({ key: "ArrowDown" });
    expect(list.selected.label).toBe("fetch/1");
    expect(list.key({ key: "ArrowUp" })).toBe("move");
    expect(list.selected.label).toBe("fetch_all/2");
  });

  it("Enter and Tab accept, Escape closes; with modifiers they are not the list's", () => {
    const list = new CompletionList();
    list.set(fetches, "fe");
    expect(list.key({ key: "Enter" })).toBe("accept");
    expect(list.key({ key: "Tab" })).toBe("accept");
    expect(list.key({ key: "Escape" })).toBe("close");
    expect(list.key({ key: "Enter", ctrlKey: true })).toBe(null);
    expect(list.key({ key: "Enter", metaKey: true })).toBe(null);
    expect(list.key({ key: "Tab", shiftKey: true })).toBe(null);
    expect(list.key({ key: "ArrowDown", altKey: true })).toBe(null);
    expect(list.key({ key: "a" })).toBe(null);
  });

  it("a new list starts at its first item", () => {
    const list = new CompletionList();
    list.set(fetches, "fe");
    list.key({ key: "ArrowDown" });
    list.set(fetches.slice(1), "fetch");
    expect(list.selected.label).toBe("fetch/2");
    list.close();
    expect(list.open).toBe(false);
    expect(list.selected).toBe(null);
  });
});

describe("CompleteDropdown", () => {
  let container, textarea, request, dropdown;

  beforeEach(() => {
    document.body.replaceChildren();
    container = document.createElement("div");
    textarea = document.createElement("textarea");
    container.append(textarea);
    document.body.append(container);
    request = vi.fn();
    dropdown = new CompleteDropdown(textarea, { request, container });
    textarea.focus();
  });

  // Types `text` at the end, as the browser does: value, cursor, then an input event.
  function type(text) {
    textarea.value += text;
    textarea.setSelectionRange(textarea.value.length, textarea.value.length);
    textarea.dispatchEvent(new Event("input", { bubbles: true }));
  }

  const key = (name, opts = {}) => {
    const event = new KeyboardEvent("keydown", { key: name, bubbles: true, cancelable: true, ...opts });
    textarea.dispatchEvent(event);
    return event;
  };
  const shown = () => [...container.querySelectorAll(".kt-complete li .kt-complete-label")].map((el) => el.textContent);
  const selected = () => container.querySelector(".kt-complete li.kt-complete-selected .kt-complete-label").textContent;
  const lastRequest = () => request.mock.calls.at(-1);
  const answer = (prefix, items) => dropdown.receive({ seq: lastRequest()[1], prefix, items });

  it("asks with the line up to the cursor, shows the answer, accepts with Enter", () => {
    type("Enum.map/2\nSampleApp.Cache.fe");
    expect(lastRequest()).toEqual(["SampleApp.Cache.fe", 1]);
    answer("fe", fetches);
    expect(dropdown.open).toBe(true);
    expect(shown()).toEqual(["fetch/1", "fetch/2", "fetch_all/2"]);
    expect(textarea.getAttribute("aria-expanded")).toBe("true");
    expect(container.querySelector(".kt-complete-detail").textContent).toBe("SampleApp.Cache.fetch/1");

    expect(key("ArrowDown").defaultPrevented).toBe(true);
    expect(selected()).toBe("fetch/2");
    expect(textarea.getAttribute("aria-activedescendant")).toBe(container.querySelector(".kt-complete-selected").id);

    const inputs = vi.fn();
    textarea.addEventListener("input", inputs);
    const calls = request.mock.calls.length;
    expect(key("Enter").defaultPrevented).toBe(true);
    expect(textarea.value).toBe("Enum.map/2\nSampleApp.Cache.fetch/2");
    expect(textarea.selectionStart).toBe(textarea.value.length);
    expect(dropdown.open).toBe(false);
    // the edit is announced as typing is, without asking again
    expect(inputs).toHaveBeenCalledTimes(1);
    expect(request.mock.calls.length).toBe(calls);
  });

  it("Tab accepts, Up wraps to the last item; Escape closes and lets later keys through", () => {
    type(":ets.ins");
    answer("ins", fetches.slice(0, 2).map((i) => ({ ...i, insert: i.insert.replace("fetch", "insert") })));
    key("ArrowUp");
    expect(key("Tab").defaultPrevented).toBe(true);
    expect(textarea.value).toBe(":ets.insert/2");

    type("\nEnum.ma");
    answer("ma", [{ label: "map/2", insert: "map/2", kind: "function", detail: "Enum.map/2" }]);
    expect(key("Escape").defaultPrevented).toBe(true);
    expect(dropdown.open).toBe(false);
    expect(key("Enter").defaultPrevented).toBe(false);
    expect(key("Tab").defaultPrevented).toBe(false);
  });

  // Seen in Chromium under load: the answer came after Escape, opened the list, and the
  // Enter meant for a new line accepted a completion instead.
  it("Escape pressed before the answer comes drops it: the next Enter is a new line's", () => {
    type("Enum.ma");
    const seq = lastRequest()[1];
    expect(dropdown.open).toBe(false);
    expect(key("Escape").defaultPrevented).toBe(false);
    dropdown.receive({ seq, prefix: "ma", items: [{ label: "map/2", insert: "map/2", kind: "function", detail: "Enum.map/2" }] });
    expect(dropdown.open).toBe(false);
    expect(key("Enter").defaultPrevented).toBe(false);
    expect(textarea.value).toBe("Enum.ma");
  });

  it("drops answers to older requests and to a line that has changed", () => {
    type("Enum.m");
    const first = lastRequest()[1];
    type("a");
    dropdown.receive({ seq: first, prefix: "m", items: fetches });
    expect(dropdown.open).toBe(false);
    answer("ma", fetches);
    expect(dropdown.open).toBe(true);

    type("p");
    textarea.value = "something else";
    answer("map", fetches);
    expect(dropdown.open).toBe(false);
  });

  it("while the next answer is on its way, shows the items that still fit", () => {
    type("SampleApp.Cache.fe");
    answer("fe", fetches);
    type("tch_");
    expect(shown()).toEqual(["fetch_all/2"]);
    key("Enter");
    expect(textarea.value).toBe("SampleApp.Cache.fetch_all/2");
  });

  it("an empty answer, a cleared line, moving the cursor, a click or leaving the field close it", () => {
    type("Enum.ma");
    answer("ma", []);
    expect(dropdown.open).toBe(false);

    for (const close of [
      () => key("ArrowLeft"),
      () => textarea.dispatchEvent(new Event("click")),
      () => textarea.blur(),
      () => {
        textarea.value = "";
        textarea.dispatchEvent(new Event("input"));
      },
    ]) {
      textarea.focus();
      textarea.value = "";
      type("Enum.ma");
      answer("ma", fetches);
      expect(dropdown.open).toBe(true);
      close();
      expect(dropdown.open).toBe(false);
    }
  });

  it("a blank line asks nothing; an answer for an unfocused field is not shown", () => {
    type("   ");
    expect(request).not.toHaveBeenCalled();
    type("Enum.ma");
    textarea.blur();
    answer("ma", fetches);
    expect(dropdown.open).toBe(false);
  });

  it("a mouse press on an item accepts it, keeping the focus", () => {
    type("SampleApp.Cache.fe");
    answer("fe", fetches);
    const item = container.querySelectorAll(".kt-complete li")[2];
    const press = new MouseEvent("mousedown", { bubbles: true, cancelable: true });
    item.querySelector(".kt-complete-label").dispatchEvent(press);
    expect(press.defaultPrevented).toBe(true);
    expect(textarea.value).toBe("SampleApp.Cache.fetch_all/2");
    expect(document.activeElement).toBe(textarea);
  });
});
