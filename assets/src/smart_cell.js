// The "Trace" smart cell's form (Kino.Trace.SmartCell). The server holds the form
// (KinoTrace.SmartCell.Controller): every change is pushed as
//   "update" {field, value}
// and the server answers every browser with "update" {field: value} (the value as
// stored), "check" (per-line pattern results and field errors, see
// KinoTrace.SmartCell.Controller.check/1), or, to the sender, "error" {field, message}.
//
// The patterns textarea is the widget's pattern editor (src/patterns.js) without its
// Apply button: lines are sent as you type (debounced) and marked inline as the server
// checks them (the line being typed once you pause or leave it), and it completes
// module and function names as the widget's does
// ("complete" {text, seq} -> "completions", see KinoTrace.Complete). It carries
// data-complete="patterns".

import { h } from "./dom.js";
import { PatternEditor, parsePatternLines } from "./patterns.js";

/** Which parts of the form each mode shows. */
export const MODE_FIELDS = {
  calls: ["patterns", "processes", "flags", "limits", "nodes"],
  messages: ["processes", "match", "limits", "nodes"],
  processes: ["processes", "limits", "nodes"],
  stats: ["patterns", "processes", "nodes"],
  record: ["patterns", "processes", "flags", "triggers", "ring", "limits", "nodes"],
};

export const MODE_LABELS = {
  calls: "Calls",
  messages: "Messages",
  processes: "Processes",
  stats: "Stats",
  record: "Record",
};

/** The choices of "processes" in a mode ("distributed" is a messages preset). */
export function processChoices(mode) {
  const choices = [
    ["all", "all processes"],
    ["new", "new processes"],
    ["existing", "existing processes"],
    ["some", "these processes…"],
  ];
  if (mode === "messages") choices.push(["distributed", "messages between nodes"]);
  return choices;
}

/** The value of "processes" to show in a mode: "distributed" outside messages is "all". */
export function shownProcesses(mode, processes) {
  return processes === "distributed" && mode !== "messages" ? "all" : processes;
}

/** Whether a part of the form shows in a mode. */
export function shows(mode, part) {
  return (MODE_FIELDS[mode] || []).includes(part);
}

/** The value of an input as it is pushed: booleans for checkboxes, text otherwise. */
export function inputValue(input) {
  return input.type === "checkbox" ? input.checked : input.value;
}

/** Text for an input from a stored value (null is empty). */
export function displayValue(value) {
  return value === null || value === undefined ? "" : String(value);
}

const PATTERN_DELAY_MS = 300;
// The line being typed is marked once typing pauses this long with no completion list
// open, or when the cursor leaves it (the server checks every 300 ms pause: a
// half-typed line is not an error yet).
const TYPING_PAUSE_MS = 1000;

export class TraceCellForm {
  /**
   * @param {import("./transport.js").Transport} server
   * @param {object} data the controller's connect payload: {form, modes, check}
   */
  constructor(server, { form, modes, check }) {
    this.server = server;
    this.form = { ...form };
    this.modes = modes || Object.keys(MODE_LABELS);
    this.inputs = new Map();
    this.pendingPatterns = null;
    this.timer = null;

    this.el = h("div", { class: "kino-trace kt-sc" });
    server.root.appendChild(this.el);
    this.build();
    this.render();
    this.showCheck(check);

    server.on("update", (fields) => this.applyUpdate(fields));
    server.on("check", (result) => this.showCheck(result));
    server.on("error", ({ field, message }) => this.showFieldError(field, message));
    server.on("completions", (reply) => this.editor.showCompletions(reply));
    server.onSync(() => this.flush());
  }

  // --- building ------------------------------------------------------------------------

  build() {
    this.modeButtons = this.modes.map((mode) =>
      h("button", {
        type: "button",
        class: "kt-sc-mode",
        "data-mode": mode,
        text: MODE_LABELS[mode] || mode,
        onclick: () => this.set("mode", mode),
      })
    );
    const header = h(
      "div",
      { class: "kt-sc-header" },
      h("span", { class: "kt-logo", text: "Trace" }),
      h("div", { class: "kt-sc-modes", role: "group", "aria-label": "What to trace" }, ...this.modeButtons)
    );

    // patterns
    this.editor = new PatternEditor(h("div"), {
      patterns: [],
      onApply: () => this.flush(),
      onComplete: (text, seq) => this.server.push("complete", { text, seq }),
      quietMs: TYPING_PAUSE_MS,
    });
    this.editor.el.classList.add("kt-sc-editor");
    this.editor.applyButton.parentElement.remove();
    this.patternsTextarea = this.editor.textarea;
    this.patternsTextarea.value = this.form.patterns || "";
    this.patternsTextarea.dataset.field = "patterns";
    this.patternsTextarea.dataset.complete = "patterns";
    this.patternsTextarea.addEventListener("input", () => this.patternsChanged());
    this.patternsTextarea.addEventListener("blur", () => this.flush());
    this.editor.fit();
    this.parts = {};
    this.parts.patterns = this.row("Patterns", "one per line: Mod, Mod.fun, Mod.fun/2, :ets.insert/2, Mod.fun(arg, _) when …", this.editor.el);

    // processes
    this.processSelect = this.select("processes", processChoices("messages"));
    const targets = this.text("targets", "MyApp.Cache, :name, #PID<0.123.0>");
    targets.classList.add("kt-sc-wide");
    this.targetsInput = targets;
    this.parts.processes = this.row("Processes", null, h("div", { class: "kt-sc-inline" }, this.processSelect, targets), "processes");

    // message pattern
    this.parts.match = this.row("Only messages", null, this.text("match", "{:ok, _}  or  {:get, key} when is_atom(key)", "kt-sc-wide kt-mono"), "match");

    // flags
    this.parts.flags = this.row(
      "Record",
      null,
      h("div", { class: "kt-sc-inline" }, this.checkbox("return", "return values"), this.checkbox("exceptions", "exceptions"), this.checkbox("caller", "caller"))
    );

    // a recorder's triggers and ring (Kino.Trace.record/2)
    this.parts.triggers = this.row(
      "Snapshot on",
      null,
      h(
        "div",
        { class: "kt-sc-inline" },
        this.checkbox("on_exception", "an exception"),
        this.labelled("a call slower than", this.number("slower_than", "none"), "ms"),
        this.labelled("a call matching", this.text("on_match", "MyApp.Orders.place(%{total: t}) when t > 1000", "kt-sc-wide kt-mono"), "")
      ),
      "on_match"
    );
    this.parts.ring = this.row(
      "Keep",
      "the newest events in memory; a trigger freezes them into a snapshot",
      h(
        "div",
        { class: "kt-sc-inline" },
        this.labelled("the newest", this.number("ring_events", "100000"), "events"),
        this.labelled("then", this.number("after", "0"), "events after a trigger")
      )
    );

    // limits and timeout
    this.parts.limits = this.row(
      "Stop or drop",
      null,
      h(
        "div",
        { class: "kt-sc-inline" },
        this.labelled("after", this.number("limit", "no limit"), "events"),
        this.labelled("at most", this.number("rate_count", "any"), "events per"),
        this.labelled(null, this.number("rate_period", "1000"), "ms"),
        this.labelled("timeout", this.number("timeout", "none"), "ms")
      )
    );

    // nodes
    this.nodesSelect = this.select("nodes", [
      ["local", "this node"],
      ["all", "this node and every connected node"],
      ["some", "these nodes…"],
    ]);
    this.nodeNamesInput = this.text("node_names", "app@host, worker@10.0.0.2", "kt-sc-wide kt-mono");
    this.parts.nodes = this.row("Nodes", null, h("div", { class: "kt-sc-inline" }, this.nodesSelect, this.nodeNamesInput), "nodes");

    this.formError = h("div", { class: "kt-sc-error", "data-error": "form", role: "alert", hidden: "" });
    const body = h("div", { class: "kt-sc-body" }, ...Object.values(this.parts), this.formError);
    this.el.append(h("div", { class: "kt-root" }, header, body));
  }

  row(label, hint, control, errorKey) {
    const children = [h("div", { class: "kt-sc-label", text: label }), h("div", { class: "kt-sc-control" }, control)];
    const row = h("div", { class: "kt-sc-row" }, ...children);
    if (hint) row.lastChild.append(h("div", { class: "kt-sc-hint", text: hint }));
    if (errorKey) {
      const error = h("div", { class: "kt-sc-error", "data-error": errorKey, role: "alert" });
      row.lastChild.append(error);
    }
    return row;
  }

  register(field, input) {
    input.dataset.field = field;
    this.inputs.set(field, input);
    input.addEventListener("change", () => this.set(field, inputValue(input)));
    if (input.tagName === "INPUT" && input.type !== "checkbox") {
      input.addEventListener("keydown", (e) => {
        if (e.key === "Enter") this.set(field, inputValue(input));
      });
    }
    return input;
  }

  select(field, choices) {
    const select = h("select", { class: "kt-sc-select", "aria-label": field });
    for (const [value, label] of choices) select.append(h("option", { value, text: label }));
    return this.register(field, select);
  }

  text(field, placeholder, cls = "kt-mono") {
    return this.register(field, h("input", { type: "text", class: `kt-sc-input ${cls}`, placeholder, spellcheck: "false", "aria-label": field }));
  }

  number(field, placeholder) {
    return this.register(field, h("input", { type: "number", min: "1", step: "1", class: "kt-sc-input kt-sc-number", placeholder, "aria-label": field }));
  }

  checkbox(field, label) {
    const input = this.register(field, h("input", { type: "checkbox" }));
    return h("label", { class: "kt-sc-check" }, input, label);
  }

  labelled(before, input, after) {
    return h("label", { class: "kt-sc-labelled" }, ...(before ? [before, " "] : []), input, " ", after);
  }

  // --- state ---------------------------------------------------------------------------

  /** Sets a field here and on the server. */
  set(field, value) {
    if (field !== "patterns") this.flush();
    this.form[field] = value;
    this.server.push("update", { field, value });
    this.render();
  }

  patternsChanged() {
    this.pendingPatterns = this.patternsTextarea.value;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.flush(), PATTERN_DELAY_MS);
  }

  /** Sends the patterns typed but not yet sent (Livebook calls it before evaluating). */
  flush() {
    clearTimeout(this.timer);
    this.timer = null;
    if (this.pendingPatterns === null) return;
    const value = this.pendingPatterns;
    this.pendingPatterns = null;
    if (value === this.form.patterns) {
      // typed back to what the server has: its check holds again
      this.showCheck(this.check);
      return;
    }
    this.form.patterns = value;
    this.server.push("update", { field: "patterns", value });
  }

  /** Fields as the server stored them (from any browser). */
  applyUpdate(fields) {
    for (const [field, value] of Object.entries(fields)) {
      this.form[field] = value;
      if (field === "patterns") {
        if (this.pendingPatterns === null && this.patternsTextarea.value !== value && document.activeElement !== this.patternsTextarea) {
          this.patternsTextarea.value = value;
          this.editor.renderMarks();
        }
      }
      this.clearRefusal(field);
    }
    this.render();
  }

  render() {
    const { mode } = this.form;
    for (const button of this.modeButtons) {
      const active = button.dataset.mode === mode;
      button.classList.toggle("kt-active", active);
      button.setAttribute("aria-pressed", String(active));
    }
    for (const [part, row] of Object.entries(this.parts)) row.hidden = !shows(mode, part);

    // distributed is offered for messages only
    const current = shownProcesses(mode, this.form.processes);
    for (const option of this.processSelect.options) option.hidden = option.value === "distributed" && mode !== "messages";

    for (const [field, input] of this.inputs) {
      if (document.activeElement === input && input.type !== "checkbox" && input.tagName !== "SELECT") continue;
      const value = field === "processes" ? current : this.form[field];
      if (input.type === "checkbox") input.checked = Boolean(value);
      else input.value = displayValue(value);
    }
    this.targetsInput.hidden = current !== "some";
    this.nodeNamesInput.hidden = this.form.nodes !== "some";
  }

  // --- checks --------------------------------------------------------------------------

  /** The server's check: pattern lines marked in place, field errors under their row. */
  showCheck(check) {
    if (!check) return;
    this.check = check;
    if (check.patterns) {
      if (check.patterns.error) {
        this.editor.results = new Map();
        this.editor.error = check.patterns.error;
        this.editor.renderMarks();
      } else {
        this.editor.sent = parsePatternLines(this.patternsTextarea.value);
        this.editor.showResults(check.patterns);
      }
    }
    for (const key of ["processes", "nodes", "match", "on_match"]) this.showFieldError(key, check[key], "check");
  }

  /**
   * Shows (or clears) an error under a field's row: `from` is "check" for the server's
   * check of the form, "refusal" for its "error" reply refusing a value.
   */
  showFieldError(field, message, from = "refusal") {
    const el = this.errorEl(field);
    if (field === "patterns" && message) {
      this.editor.error = message;
      this.editor.renderMarks();
      return;
    }
    const target = el || this.formError;
    if (!el && !message && target.dataset.field !== field) return;
    target.dataset.field = field;
    target.dataset.from = from;
    target.textContent = message || "";
    target.hidden = !message;
  }

  /**
   * The server stored a value of `field`: a refusal of an earlier value no longer holds.
   * An error of its check stays: the check says when it goes (a value the server already
   * had is answered without one: Enter and the change event after it send the field
   * twice, and the second answer cleared what the first one's check had shown).
   */
  clearRefusal(field) {
    const target = this.errorEl(field) || this.formError;
    if (target.dataset.from === "refusal" && target.dataset.field === field) this.showFieldError(field, null);
  }

  errorEl(field) {
    const key = field === "targets" ? "processes" : field === "node_names" ? "nodes" : field;
    return this.el.querySelector(`[data-error="${key}"]`);
  }
}
