// Completion as you type for a textarea (or an input) of pattern lines: a dropdown of
// the server's suggestions (KinoTrace.Complete), navigable with the keyboard.
//
//   const dropdown = new CompleteDropdown(textarea, {
//     request: (text, seq) => server.push("complete", { text, seq }),  // ask the server
//     container: el,   // where the list goes (position: relative); default: the parent
//   });
//   server.on("completions", (reply) => dropdown.receive(reply));     // its answers
//
// Each edit asks for the completions of the current line up to the cursor; the answer
// is {seq, prefix, items: [{label, insert, kind, detail}]} and accepting an item
// replaces `prefix` (the end of that text) with `item.insert`. Answers to older
// requests, or to a line that has changed since, are dropped.
//
// Keys while the list is open: Down/Up move (wrapping), Enter or Tab accept, Escape
// closes (with the list closed, Escape drops the answer on its way). A click on an item
// accepts it. Moving the cursor or leaving the field closes
// the list. Accepting changes the field's value and fires an "input" event (bubbling),
// as typing does, without asking for completions again.

import { h } from "./dom.js";

/** The current line of `value` up to `cursor`. */
export function lineBefore(value, cursor) {
  return value.slice(value.lastIndexOf("\n", cursor - 1) + 1, cursor);
}

/**
 * The value and cursor after accepting `insert` for the `prefix` that ends at `cursor`
 * (when the text there does not end with `prefix`, `insert` goes in at the cursor).
 */
export function applyCompletion(value, cursor, prefix, insert) {
  const start = value.slice(0, cursor).endsWith(prefix) ? cursor - prefix.length : cursor;
  return { value: value.slice(0, start) + insert + value.slice(cursor), cursor: start + insert.length };
}

/**
 * The list's state, without DOM: the items, which one is selected, and what a key does.
 * `key(event)` takes a KeyboardEvent (or {key, shiftKey, ctrlKey, metaKey, altKey}) and
 * returns what to do: "move" (the selection moved), "accept", "close", or null (not a
 * key of the list: let it through).
 */
export class CompletionList {
  constructor() {
    this.items = [];
    this.prefix = "";
    this.index = 0;
  }

  get open() {
    return this.items.length > 0;
  }

  get selected() {
    return this.items[this.index] || null;
  }

  set(items, prefix) {
    this.items = items || [];
    this.prefix = prefix || "";
    this.index = 0;
  }

  close() {
    this.set([], "");
  }

  key({ key, shiftKey = false, ctrlKey = false, metaKey = false, altKey = false }) {
    if (!this.open) return null;
    const plain = !shiftKey && !ctrlKey && !metaKey && !altKey;
    const n = this.items.length;
    if (key === "ArrowDown" && plain) {
      this.index = (this.index + 1) % n;
      return "move";
    }
    if (key === "ArrowUp" && plain) {
      this.index = (this.index - 1 + n) % n;
      return "move";
    }
    if ((key === "Enter" || key === "Tab") && plain) return "accept";
    if (key === "Escape") return "close";
    return null;
  }
}

// Keys that move the cursor elsewhere: the list no longer fits.
const CURSOR_KEYS = new Set(["ArrowLeft", "ArrowRight", "Home", "End", "PageUp", "PageDown"]);

let instances = 0;

export class CompleteDropdown {
  /**
   * @param {HTMLTextAreaElement|HTMLInputElement} input
   * @param {object} opts request(text, seq) asks for completions; container, the element
   *   the list is placed in (positioned), default input.parentElement
   */
  constructor(input, { request, container = input.parentElement, onClose = null }) {
    this.input = input;
    this.request = request;
    this.onClose = onClose;
    this.container = container;
    this.list = new CompletionList();
    this.seq = 0;
    this.asked = null; // the text of the latest request
    this.shownFor = null; // the text the shown items are for
    this.accepting = false;

    const id = `kt-complete-${++instances}`;
    this.el = h("ul", { class: "kt-complete", role: "listbox", id, hidden: "" });
    // keep the focus in the field when an item is clicked
    this.el.addEventListener("mousedown", (e) => {
      e.preventDefault();
      const li = e.target.closest("li[data-index]");
      if (li) {
        this.list.index = Number(li.dataset.index);
        this.accept();
      }
    });
    container.appendChild(this.el);

    input.setAttribute("autocomplete", "off");
    input.setAttribute("aria-autocomplete", "list");
    input.setAttribute("aria-controls", id);
    input.setAttribute("aria-expanded", "false");

    input.addEventListener("input", () => {
      if (!this.accepting) this.ask();
    });
    input.addEventListener("keydown", (e) => this.keydown(e));
    input.addEventListener("blur", () => this.close());
    input.addEventListener("click", () => this.close());
  }

  /**
   * Asks for the completions of the current line up to the cursor. Until the answer
   * comes, the list shows those of its items that still fit what is typed.
   */
  ask() {
    const { value, selectionStart, selectionEnd } = this.input;
    if (selectionStart !== selectionEnd) return this.close();
    const text = lineBefore(value, selectionStart);
    if (!text.trim()) return this.close();
    this.narrow(text);
    this.asked = text;
    this.request(text, ++this.seq);
  }

  /** The server's answer: {seq, prefix, items}. */
  receive({ seq, prefix, items } = {}) {
    if (seq !== this.seq) return; // an older request's
    const { value, selectionStart, selectionEnd } = this.input;
    const current = selectionStart === selectionEnd ? lineBefore(value, selectionStart) : null;
    if (current !== this.asked || document.activeElement !== this.input) return this.close();
    this.list.set(items, prefix);
    this.shownFor = current;
    this.render();
  }

  // The shown items that still fit once `text` is typed (it continues the line they
  // were for), with the prefix grown by what was typed since.
  narrow(text) {
    if (!this.list.open) return;
    if (this.shownFor == null || !text.startsWith(this.shownFor)) return this.close();
    const typed = this.list.prefix + text.slice(this.shownFor.length);
    const items = this.list.items.filter((item) => item.insert.startsWith(typed));
    if (items.every((item) => item.insert === typed)) return this.close();
    this.list.set(items, typed);
    this.shownFor = text;
    this.render();
  }

  keydown(e) {
    if (e.isComposing) return;
    const action = this.list.key(e);
    if (action) {
      e.preventDefault();
      e.stopPropagation();
    }
    if (action === "move") this.renderSelection();
    else if (action === "accept") this.accept();
    else if (action === "close") this.close();
    // (Escape with the list closed: an answer still on its way must not open it, and
    // turn the Enter that follows into an accept; the key goes through)
    else if (CURSOR_KEYS.has(e.key) || e.key === "Escape") this.close();
  }

  /** Replaces the typed prefix with the selected item. */
  accept() {
    const item = this.list.selected;
    if (!item) return;
    const { value, cursor } = applyCompletion(this.input.value, this.input.selectionStart, this.list.prefix, item.insert);
    this.close();
    this.input.value = value;
    this.input.setSelectionRange(cursor, cursor);
    this.accepting = true;
    try {
      this.input.dispatchEvent(new Event("input", { bubbles: true }));
    } finally {
      this.accepting = false;
    }
  }

  close() {
    this.seq++; // answers on their way are stale now
    this.list.close();
    this.shownFor = null;
    this.el.hidden = true;
    this.el.replaceChildren();
    this.input.setAttribute("aria-expanded", "false");
    this.input.removeAttribute("aria-activedescendant");
    if (this.onClose) this.onClose();
  }

  get open() {
    return !this.el.hidden;
  }

  render() {
    if (!this.list.open) return this.close();
    this.el.replaceChildren(
      ...this.list.items.map((item, i) => {
        const li = h(
          "li",
          { role: "option", id: `${this.el.id}-${i}`, "data-index": i, "data-kind": item.kind },
          h("span", { class: "kt-complete-kind", text: item.kind === "module" ? "M" : "F", "aria-hidden": "true" }),
          h("span", { class: "kt-complete-label", text: item.label })
        );
        if (item.detail && item.detail !== item.label) li.append(h("span", { class: "kt-complete-detail", text: item.detail }));
        return li;
      })
    );
    this.el.hidden = false;
    this.input.setAttribute("aria-expanded", "true");
    this.place();
    this.renderSelection();
  }

  renderSelection() {
    [...this.el.children].forEach((li, i) => {
      const selected = i === this.list.index;
      li.classList.toggle("kt-complete-selected", selected);
      li.setAttribute("aria-selected", String(selected));
      if (selected) {
        this.input.setAttribute("aria-activedescendant", li.id);
        if (li.scrollIntoView) li.scrollIntoView({ block: "nearest" });
      }
    });
  }

  /** Puts the list under the cursor's line, starting where the replaced text starts. */
  place() {
    const input = this.input;
    const style = getComputedStyle(input);
    const px = (v) => parseFloat(v) || 0;
    const lineHeight = px(style.lineHeight) || px(style.fontSize) * 1.4 || 20;
    const before = input.value.slice(0, input.selectionStart);
    const row = before.split("\n").length - 1;
    const column = lineBefore(input.value, input.selectionStart).length - this.list.prefix.length;
    const inputBox = input.getBoundingClientRect();
    const box = this.container.getBoundingClientRect();
    const top = inputBox.top - box.top + px(style.borderTopWidth) + px(style.paddingTop) + (row + 1) * lineHeight - input.scrollTop;
    const left = inputBox.left - box.left + px(style.borderLeftWidth) + px(style.paddingLeft) + column * charWidth(style, this.container) - input.scrollLeft;
    // the labels, not the list's edge, line up with the replaced text
    const label = this.el.querySelector(".kt-complete-label");
    const indent = label ? label.getBoundingClientRect().left - this.el.getBoundingClientRect().left : 0;
    this.el.style.top = `${Math.round(top + 2)}px`;
    this.el.style.left = `${Math.round(Math.max(0, Math.min(left - indent, box.width - this.el.offsetWidth)))}px`;
  }
}

// The width of a character of the field's (monospace) font, measured once per font.
const widths = new Map();
function charWidth(style, parent) {
  const font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  if (!widths.has(font)) {
    const probe = h("span", { text: "0".repeat(20) });
    probe.style.cssText = `position:absolute;visibility:hidden;white-space:pre;font:${font}`;
    parent.appendChild(probe);
    const width = probe.getBoundingClientRect().width / 20;
    probe.remove();
    if (width > 0) widths.set(font, width);
    return width || parseFloat(style.fontSize) * 0.6 || 8;
  }
  return widths.get(font);
}
