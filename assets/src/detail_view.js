// The details of the selected log row or sequence item, below the panels: the call's
// arguments and result (or a message's content and its facts) from the full terms the
// server sends on request ("get_term"), the row's short forms until they arrive.

import { h } from "./dom.js";
import {
  formatTime,
  formatDuration,
  who,
  whoWithNode,
  kindLook,
  isMessageKind,
  isNormalExit,
  peerLabel,
  functionLabel,
} from "./format.js";

export class DetailView {
  /** @param {object} opts onClose() for the close button */
  constructor({ onClose }) {
    this.onClose = onClose;
    this.el = h("div", { class: "kt-detail", hidden: "", "data-testid": "detail" });
  }

  /** Draws `entry` with the full terms known so far (`terms`: Map id -> term). */
  render(entry, terms) {
    const call = terms.get(entry.id);
    const ret = entry.returnId != null ? terms.get(entry.returnId) : entry.kind !== "call" ? call : null;

    const look = isMessageKind(entry.kind) ? kindLook(entry.kind) : null;
    const title = h(
      "div",
      { class: "kt-detail-title" },
      look ? kindBadge(entry) : "",
      h("span", { class: "kt-mono kt-call", text: look ? detailHeadline(entry) : functionLabel(entry) || entry.kind }),
      h("span", { class: "kt-muted kt-mono", text: look ? [formatTime(entry.time), entry.remote && entry.node].filter(Boolean).join(" · ") : `${whoWithNode(entry)} · ${formatTime(entry.time)}` }),
      entry.duration != null ? h("span", { class: "kt-duration", text: formatDuration(entry.duration) }) : "",
      h("button", {
        class: "kt-button kt-close",
        type: "button",
        "aria-label": "Close details",
        text: "×",
        onclick: () => this.onClose(),
      })
    );
    const sections = [];
    const section = (label, text, cls = "") =>
      sections.push(h("div", { class: "kt-detail-label", text: label }), h("pre", { class: `kt-term ${cls}`, text }));
    const loading = "loading…";

    if (entry.kind === "call" && entry.caller) {
      sections.push(h("dl", { class: "kt-facts" }, h("dt", { text: "Called from" }), h("dd", { class: "kt-mono kt-caller", text: entry.caller })));
    }
    if (!look && entry.mfa_label && entry.mfa) {
      // a function the compiler made: the name the VM knows it by
      sections.push(h("dl", { class: "kt-facts" }, h("dt", { text: "Compiled name" }), h("dd", { class: "kt-mono kt-raw-mfa", text: entry.mfa })));
    }
    if (entry.kind === "call") {
      if (call && call.args) call.args.forEach((arg, i) => section(`Argument ${i + 1}`, arg));
      else if (call && call.error) section("Arguments", call.error, "kt-muted");
      else section("Call", entry.call || loading);
    }
    if (entry.result != null) section("Returned", ret ? ret.result ?? ret.error : entry.result);
    if (entry.exception != null) section("Raised", ret ? ret.exception ?? ret.error : entry.exception, "kt-exception");
    // the Erlang class and reason the banner above was made from
    if (entry.exception != null && ret && ret.exception_raw != null) section("Class and reason", ret.exception_raw, "kt-exception-raw");
    if (look) {
      const full = call && call.data != null ? call.data : call && call.error ? call.error : entry.data;
      if (entry.data != null) section(DATA_LABELS[entry.kind] || "Data", full ?? loading, entry.kind === "exit" && !isNormalExit(entry.data) ? "kt-exception" : "");
      const facts = messageFacts(entry);
      if (facts.length) {
        sections.push(
          h("dl", { class: "kt-facts" }, ...facts.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { class: "kt-mono", text: v })]))
        );
      }
    } else if (entry.data != null) section("Data", (ret && ret.data) || entry.data);
    if (entry.kind === "call" && entry.result == null && entry.exception == null) {
      sections.push(h("div", { class: "kt-muted kt-detail-note", text: "No return seen yet." }));
    }
    if ((call && call.cut) || (ret && ret.cut)) {
      sections.push(
        h("div", {
          class: "kt-muted kt-detail-note",
          text: "Parts shown as ... were too large to copy out of the traced process (see the trace's term-size options).",
        })
      );
    }
    this.el.replaceChildren(title, h("div", { class: "kt-detail-body" }, ...sections));
  }
}

// --- message and process events ---------------------------------------------------------

const DATA_LABELS = {
  send: "Message",
  send_to_non_existing: "Message",
  receive: "Message",
  exit: "Reason",
  spawn: "Function",
  spawned: "Function",
  register: "Name",
  unregister: "Name",
};

function kindBadge(entry) {
  const look = kindLook(entry.kind);
  const tone = entry.kind === "exit" && !isNormalExit(entry.data) ? "bad" : look.tone;
  return h("span", { class: `kt-kind kt-tone-${tone}`, "data-kind": entry.kind }, h("span", { class: "kt-kind-icon", text: look.icon }), look.label);
}

function detailHeadline(entry) {
  if (entry.kind === "send" || entry.kind === "send_to_non_existing") return `${who(entry)} → ${peerLabel(entry)}`;
  if (entry.kind === "spawn") return `${who(entry)} spawned ${peerLabel(entry)}`;
  if (entry.peer) return `${who(entry)} · ${peerLabel(entry)}`;
  return who(entry);
}

/** Facts about a message or process event for the detail panel: [label, value]. */
function messageFacts(entry) {
  const facts = [];
  if (entry.kind === "send" || entry.kind === "send_to_non_existing") {
    facts.push(["From", [entry.name, entry.pid].filter(Boolean).join(" ")]);
    facts.push(["To", [entry.peer_name, entry.peer].filter(Boolean).join(" ")]);
    facts.push(["Sent", formatTime(entry.time)]);
    if (entry.received != null) {
      const later = entry.received - entry.time;
      facts.push(["Received", `${formatTime(entry.received)} (${later > 0 ? `${formatDuration(later * 1000)} later` : "within the same µs"})`]);
    } else if (entry.kind === "send_to_non_existing") facts.push(["Received", "never: no such process"]);
  } else if (entry.peer) {
    facts.push([entry.kind === "spawn" ? "Child" : entry.kind === "spawned" ? "Parent" : "Other process", [entry.peer_name, entry.peer].filter(Boolean).join(" ")]);
  }
  if (entry.remote && entry.node) facts.push(["Node", entry.node]);
  return facts;
}
