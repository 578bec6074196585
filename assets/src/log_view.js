// The log tab: a header row and a VirtualList of the model's entries (the filtered view),
// one fixed-height row each, and a note while there is nothing to show.

import { VirtualList } from "./virtual_list.js";
import { h } from "./dom.js";
import {
  formatTime,
  formatDuration,
  who,
  shortNode,
  kindLook,
  eventBody,
  isMessageKind,
  isNormalExit,
  entryText,
  entryOutcome,
  callerText,
} from "./format.js";

// Shown on a row whose process lost events just before it (see Kino.Trace.Event's :lost).
export const LOST_TEXT = "Events of this process were dropped just before this one (a limit or a full queue): its open calls were forgotten and its depth restarts at 0.";

const ROW_HEIGHT = 24;

export class LogView {
  /**
   * @param {LogModel} model what the rows show
   * @param {object} opts onSelect(entry) for a click on a row
   */
  constructor(model, { onSelect }) {
    this.model = model;
    this.el = h("div", { class: "kt-panel kt-log", "data-panel": "log" });
    this.el.appendChild(
      h(
        "div",
        { class: "kt-row kt-row-head" },
        h("span", { class: "kt-c-time", text: "Time" }),
        h("span", { class: "kt-c-node", text: "Node" }),
        h("span", { class: "kt-c-who", text: "Process" }),
        h("span", { class: "kt-c-call", text: "Call" }),
        h("span", { class: "kt-c-out", text: "Result" }),
        h("span", { class: "kt-c-dur", text: "Duration" })
      )
    );
    this.list = new VirtualList(this.el, {
      rowHeight: ROW_HEIGHT,
      length: () => model.viewLength,
      item: (i) => model.viewAt(i),
      createRow: () => createRow(),
      renderRow: (el, entry) => renderRow(el, entry),
      onSelect: (entry) => onSelect(entry),
    });
    this.emptyEl = h("div", { class: "kt-empty kt-log-empty", text: "Waiting for calls…" });
    this.el.appendChild(this.emptyEl);
  }

  /** Redraws after the model or its filter changed. */
  update() {
    // no duration or result yet (a trace without returns, of messages only): no column
    this.el.classList.toggle("kt-no-durations", this.model.timed === 0);
    this.el.classList.toggle("kt-no-outcomes", this.model.outcomes === 0);
    // a remote pid is longer, and has a node badge: a wider Process column
    this.el.classList.toggle("kt-has-remote", this.model.remote > 0);
    this.list.update();
    this.emptyEl.hidden = this.model.viewLength > 0;
    this.emptyEl.textContent = this.model.filter ? "No entry matches the filter." : "Waiting for calls…";
  }
}

// --- rows -------------------------------------------------------------------------------

function createRow() {
  const el = document.createElement("div");
  el.setAttribute("role", "listitem");
  for (const cls of ["kt-c-time", "kt-c-node", "kt-c-who", "kt-c-call", "kt-c-out", "kt-c-dur"]) {
    const span = document.createElement("span");
    span.className = cls;
    el.appendChild(span);
  }
  // the time: hours and minutes, seconds and milliseconds, microseconds, so that a
  // narrow log can show the middle part alone
  const time = el.children[0];
  const hm = document.createElement("span");
  hm.className = "kt-time-hm";
  const us = document.createElement("span");
  us.className = "kt-time-us";
  time.append(hm, document.createTextNode(""), us);
  // the process: its name or pid (a narrow log leaves out the "#PID"), and a badge
  // naming its node when that is another node
  const whoEl = el.children[2];
  const whoText = document.createElement("span");
  whoText.className = "kt-who-text";
  const pidPrefix = document.createElement("span");
  pidPrefix.className = "kt-pid-prefix";
  whoText.append(pidPrefix, document.createTextNode(""));
  const nodeBadge = document.createElement("span");
  nodeBadge.className = "kt-node-badge";
  nodeBadge.hidden = true;
  whoEl.append(whoText, nodeBadge);
  // the call cell: a kind badge (message and process events) and the text
  const call = el.children[3];
  const badge = document.createElement("span");
  badge.className = "kt-kind";
  const icon = document.createElement("span");
  icon.className = "kt-kind-icon";
  badge.append(icon, document.createTextNode(""));
  // the text: module and function (the head), arguments, and for a function the compiler
  // made where it was made ("in Enum.reduce/3", the tail); when the cell is narrow the
  // arguments give way first, then the module, so the function's name always shows
  const text = document.createElement("span");
  text.className = "kt-c-text";
  const head = document.createElement("span");
  head.className = "kt-c-head";
  for (const cls of ["kt-c-mod", "kt-c-fun"]) {
    const part = document.createElement("span");
    part.className = cls;
    head.appendChild(part);
  }
  text.appendChild(head);
  for (const cls of ["kt-c-args", "kt-c-tail"]) {
    const part = document.createElement("span");
    part.className = cls;
    text.appendChild(part);
  }
  call.append(badge, text);
  return el;
}

// "Mod.Sub.fun(args)" -> ["Mod.Sub.", "fun", "(args)", ""]; a function the compiler made,
// "anonymous fn(args) in Enum.reduce/3" (KinoTrace.Base.MFA.label_call/3) ->
// ["", "anonymous fn", "(args)", " in Enum.reduce/3"]: what identifies it stays whole, its
// arguments give way as any call's do. Any other text that names no module's function is
// all "arguments".
const IN = ") in ";

export function splitCall(text) {
  const open = text.indexOf("(");
  const head = open < 0 ? text : text.slice(0, open);
  const args = open < 0 ? "" : text.slice(open);
  if (/\s/.test(head)) {
    const close = text.lastIndexOf(IN);
    return open > 0 && close >= open
      ? ["", head, text.slice(open, close + 1), text.slice(close + 1)]
      : ["", "", text, ""];
  }
  const dot = head.lastIndexOf(".");
  return dot > 0 ? [head.slice(0, dot + 1), head.slice(dot + 1), args, ""] : ["", head, args, ""];
}

function renderRow(el, entry) {
  if (!entry) return;
  const [time, node, whoEl, call, out, dur] = el.children;
  const clock = formatTime(entry.time);
  time.childNodes[0].textContent = clock.slice(0, 6);
  time.childNodes[1].textContent = clock.slice(6, 12);
  time.childNodes[2].textContent = clock.slice(12);
  time.title = clock;
  node.textContent = entry.node || "";
  const [whoText, nodeBadge] = whoEl.children;
  const name = who(entry);
  const pid = name.startsWith("#PID<");
  whoText.firstChild.textContent = pid ? "#PID" : "";
  whoText.lastChild.textContent = pid ? name.slice(4) : name;
  const remote = !!(entry.remote && entry.node);
  nodeBadge.textContent = remote ? shortNode(entry.node) : "";
  nodeBadge.hidden = !remote;
  whoEl.title = [entry.name, entry.pid, entry.node].filter(Boolean).join(" ");
  const [badge, textEl] = call.children;
  const look = entry.kind === "call" ? null : kindLook(entry.kind);
  const message = isMessageKind(entry.kind);
  if (message) {
    const tone = entry.kind === "exit" && !isNormalExit(entry.data) ? "bad" : look.tone;
    badge.className = `kt-kind kt-tone-${tone}`;
    badge.firstChild.textContent = look.icon;
    badge.lastChild.textContent = look.label;
    badge.hidden = false;
  } else if (!badge.hidden) {
    badge.hidden = true;
    badge.firstChild.textContent = badge.lastChild.textContent = "";
  }
  const text = message ? eventBody(entry) : entryText(entry);
  const [mod, fun, args, tail] = message ? ["", text, "", ""] : splitCall(text);
  const [head, argsEl, tailEl] = textEl.children;
  head.firstChild.textContent = mod;
  head.lastChild.textContent = fun;
  argsEl.textContent = args;
  tailEl.textContent = tail;
  // the room the head and the tail leave the arguments (main.css)
  textEl.className = `kt-c-text${args ? " kt-has-args" : ""}${tail ? " kt-has-tail" : ""}`;
  textEl.style.setProperty("--kt-tail", `${tail.length}ch`);
  textEl.style.setProperty("--kt-head-min", tail ? "1.5em" : mod ? `calc(2.5em + ${fun.length}ch)` : `${fun.length}ch`);
  call.style.paddingLeft = message ? "" : `${(entry.depth || 0) * 16}px`;
  call.title = [entryText(entry), callerText(entry), entry.lost ? LOST_TEXT : null].filter(Boolean).join("\n");
  const outcome = entryOutcome(entry);
  out.textContent = outcome;
  out.title = outcome;
  dur.textContent = formatDuration(entry.duration);
  el.dataset.kind = entry.kind;
  el.classList.toggle("kt-row-exception", entry.exception != null);
  el.classList.toggle("kt-row-pending", entry.kind === "call" && entry.result == null && entry.exception == null);
  el.classList.toggle("kt-row-other", entry.kind !== "call" && !message);
  el.classList.toggle("kt-row-message", message);
  el.classList.toggle("kt-row-lost", !!entry.lost);
  el.dataset.id = String(entry.id);
}
