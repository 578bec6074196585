// The pattern editor: a textarea with one pattern per line. Bad lines are marked in
// place (a highlight behind the line) and listed with the server's message. With an
// onComplete callback, it offers completions as you type (complete_dropdown.js).

import { CompleteDropdown } from "./complete_dropdown.js";

/** The patterns in the text, with their line numbers (0-based); blank and # lines skipped. */
export function parsePatternLines(text) {
  const out = [];
  text.split(/\r?\n/).forEach((raw, line) => {
    const pattern = raw.trim();
    if (pattern && !pattern.startsWith("#")) out.push({ line, pattern });
  });
  return out;
}

/**
 * Pairs the server's per-pattern results with the lines they came from. Results are in
 * the order the patterns were sent; when that does not fit (another browser sent them)
 * they are matched by text. Returns a Map line -> result.
 */
export function matchResults(lines, results) {
  const byLine = new Map();
  const inOrder =
    lines.length === results.length && lines.every((l, i) => l.pattern === results[i].input);
  if (inOrder) {
    lines.forEach((l, i) => byLine.set(l.line, results[i]));
  } else {
    const byInput = new Map(results.map((r) => [r.input, r]));
    for (const l of lines) if (byInput.has(l.pattern)) byLine.set(l.line, byInput.get(l.pattern));
  }
  return byLine;
}

/** The line (0-based) the textarea's cursor is on. */
export function cursorLine(textarea) {
  return textarea.value.slice(0, textarea.selectionStart).split("\n").length - 1;
}

export class PatternEditor {
  /**
   * @param {HTMLElement} parent
   * @param {object} opts patterns (initial list), onApply(patterns: string[]), and
   *   optionally onComplete(text, seq), which asks the server for the completions of
   *   `text`, the line up to the cursor (answers go to showCompletions), and quietMs:
   *   results arrive as you type (the smart cell), so the line being typed is not marked
   *   until the cursor leaves it, the field loses the focus, or typing pauses for
   *   quietMs with no completion list open (a half-typed line is not an error yet)
   */
  constructor(parent, { patterns = [], onApply, onComplete, quietMs = null }) {
    this.onApply = onApply;
    this.results = new Map();
    this.error = null;
    this.quietMs = quietMs;
    this.typedLine = null; // the line being typed, not marked yet (with quietMs)
    this.typedAt = 0;
    this.quietTimer = null;

    this.el = document.createElement("div");
    this.el.className = "kt-patterns";

    const field = document.createElement("div");
    field.className = "kt-editor";
    this.backdrop = document.createElement("div");
    this.backdrop.className = "kt-editor-backdrop";
    this.backdrop.setAttribute("aria-hidden", "true");
    this.textarea = document.createElement("textarea");
    this.textarea.className = "kt-editor-input";
    this.textarea.spellcheck = false;
    this.textarea.setAttribute("aria-label", "Patterns to trace, one per line");
    this.textarea.placeholder = "MyApp.Repo.get/2\nEnum.map(list, _) when length(list) > 100";
    this.textarea.value = patterns.join("\n");
    field.append(this.backdrop, this.textarea);

    const side = document.createElement("div");
    side.className = "kt-editor-side";
    this.applyButton = document.createElement("button");
    this.applyButton.type = "button";
    this.applyButton.className = "kt-button kt-button-primary";
    this.applyButton.textContent = "Apply";
    this.applyButton.title = "Replace the patterns of the running trace (Ctrl+Enter)";
    this.applyButton.dataset.action = "apply-patterns";
    this.note = document.createElement("div");
    this.note.className = "kt-editor-note";
    side.append(this.applyButton, this.note);

    this.messages = document.createElement("ul");
    this.messages.className = "kt-editor-messages";

    this.el.append(field, side, this.messages);
    parent.appendChild(this.el);
    this.completion = onComplete
      ? new CompleteDropdown(this.textarea, { request: onComplete, container: this.el, onClose: () => this.settle() })
      : null;

    this.applyButton.addEventListener("click", () => this.apply());
    this.textarea.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        this.apply();
      }
    });
    this.textarea.addEventListener("input", () => {
      // edits make old marks meaningless
      this.results = new Map();
      this.error = null;
      this.note.textContent = "";
      if (this.quietMs != null && document.activeElement === this.textarea) {
        this.typedLine = cursorLine(this.textarea);
        this.typedAt = performance.now();
        this.armQuiet();
      }
      this.renderMarks();
    });
    // the cursor left the line being typed, or the field lost the focus: mark it now
    const left = () => {
      if (this.typedLine === null) return;
      if (document.activeElement === this.textarea && cursorLine(this.textarea) === this.typedLine) return;
      this.typedLine = null;
      this.renderMarks();
    };
    this.textarea.addEventListener("keyup", left);
    this.textarea.addEventListener("click", left);
    this.textarea.addEventListener("blur", left);
    this.textarea.addEventListener("scroll", () => {
      this.backdrop.scrollTop = this.textarea.scrollTop;
    });
    this.fit();
    this.renderMarks();
  }

  armQuiet() {
    clearTimeout(this.quietTimer);
    this.quietTimer = setTimeout(() => this.settle(), this.quietMs);
  }

  /** Marks the line being typed once typing paused and no completion list is open. */
  settle() {
    if (this.typedLine === null) return;
    const typing = document.activeElement === this.textarea && performance.now() - this.typedAt < this.quietMs;
    if (typing || (this.completion && this.completion.open)) return this.armQuiet();
    this.typedLine = null;
    this.renderMarks();
  }

  apply() {
    this.sent = parsePatternLines(this.textarea.value);
    this.note.textContent = "Applying…";
    this.onApply(this.sent.map((l) => l.pattern));
  }

  /**
   * Shows the server's answer: {patterns, results: [{input, ok, error, warning}]}, or
   * {patterns, results: [], error} when the edit was refused as a whole.
   */
  showResults({ results, error }) {
    const lines = this.sent || parsePatternLines(this.textarea.value);
    this.sent = null;
    this.error = error || null;
    if (this.error) {
      this.results = new Map();
      this.note.textContent = "Not applied";
      this.note.classList.add("kt-bad");
      this.renderMarks();
      return;
    }
    this.results = matchResults(lines, results);
    const bad = results.filter((r) => !r.ok).length;
    const good = results.length - bad;
    this.note.textContent = bad
      ? `${good} applied, ${bad} not`
      : `${good} pattern${good === 1 ? "" : "s"} applied`;
    this.note.classList.toggle("kt-bad", bad > 0);
    this.renderMarks();
  }

  /** The server's answer to onComplete: {seq, prefix, items}. */
  showCompletions(reply) {
    if (this.completion) this.completion.receive(reply);
  }

  renderMarks() {
    const lines = this.textarea.value.split(/\r?\n/);
    this.backdrop.replaceChildren(
      ...lines.map((text, i) => {
        const div = document.createElement("div");
        const result = this.results.get(i);
        div.className = "kt-editor-line";
        if (i === this.typedLine) div.classList.add("kt-line-typing");
        else if (result && !result.ok) div.classList.add("kt-line-error");
        else if (result && result.warning) div.classList.add("kt-line-warning");
        div.textContent = text || " ";
        return div;
      })
    );
    const items = [];
    if (this.error) {
      const li = document.createElement("li");
      li.className = "kt-error";
      li.textContent = this.error;
      items.push(li);
    }
    for (const [line, result] of [...this.results.entries()].sort((a, b) => a[0] - b[0])) {
      if ((result.ok && !result.warning) || line === this.typedLine) continue;
      const li = document.createElement("li");
      li.className = result.ok ? "kt-warning" : "kt-error";
      li.dataset.line = String(line + 1);
      const where = document.createElement("span");
      where.className = "kt-editor-where";
      where.textContent = `line ${line + 1}`;
      const text = document.createElement("span");
      text.textContent = result.ok ? result.warning : result.error;
      li.append(where, text);
      items.push(li);
    }
    this.messages.replaceChildren(...items);
    this.fit();
  }

  fit() {
    const rows = Math.min(Math.max(this.textarea.value.split("\n").length, 2), 8);
    this.textarea.rows = rows;
  }
}
