// Small formatting helpers shared by the log, stats and calls views.

/** Formats a system time in microseconds as local `HH:MM:SS.mmmuuu`. */
export function formatTime(us) {
  if (us == null) return "";
  const ms = Math.floor(us / 1000);
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const micros = pad(((us % 1_000_000) + 1_000_000) % 1_000_000, 6);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${micros}`;
}

/** Formats a duration in nanoseconds with a unit that keeps 3 significant digits. */
export function formatDuration(ns) {
  if (ns == null) return "";
  if (ns < 999.5) return `${Math.round(ns)} ns`;
  if (ns < 1_000_000) return `${trim(ns / 1_000)} µs`;
  if (ns < 1_000_000_000) return `${trim(ns / 1_000_000)} ms`;
  return `${trim(ns / 1_000_000_000)} s`;
}

/** Microseconds, with a unit (the VM counts whole µs; latency figures are in µs). */
export function formatMicros(us) {
  if (us == null) return "";
  return us === 0 ? "0 µs" : formatDuration(us * 1000);
}

/** A share (0..1) as a percentage with one decimal. */
export function formatShare(share) {
  if (share == null) return "";
  const pct = share * 100;
  if (pct > 0 && pct < 0.1) return "<0.1%";
  return `${pct.toFixed(1).replace(/\.0$/, "")}%`;
}

function trim(x) {
  if (x >= 100) return String(Math.round(x));
  if (x >= 10) return x.toFixed(1).replace(/\.0$/, "");
  return x.toFixed(2).replace(/\.?0+$/, "");
}

/** Formats a count compactly: 999, 1.2k, 34k, 1.5M. */
export function formatCount(n) {
  if (n == null) return "0";
  if (n < 1_000) return String(n);
  if (n < 1_000_000) return `${trim(n / 1_000)}k`;
  return `${trim(n / 1_000_000)}M`;
}

/** Formats a rate in events per second. */
export function formatRate(rate) {
  if (!rate) return "0/s";
  return `${rate < 10 ? rate.toFixed(1).replace(/\.0$/, "") : formatCount(Math.round(rate))}/s`;
}

/**
 * The function of an event as a person reads it: `mfa_label` when the server sent one (a
 * function the compiler made reads `anonymous fn/2 in Enum.sum/1`, by KinoTrace.Base.MFA's
 * rule), else the raw `Module.function/arity`.
 */
export function functionLabel(entry) {
  return entry.mfa_label || entry.mfa || "";
}

/** Who ran the event: the registered name when there is one, else the pid. */
export function who(entry) {
  return entry.name || entry.pid || "";
}

/**
 * A node's short label for a badge: its name without the host (`livebook` for
 * `livebook@127.0.0.1`); the whole node when it has no name part.
 */
export function shortNode(node) {
  if (!node) return "";
  const at = node.indexOf("@");
  return at > 0 ? node.slice(0, at) : node;
}

/** Who ran the event, with its node when the event comes from another node. */
export function whoWithNode(entry) {
  const name = who(entry);
  return entry.remote && entry.node ? `${name} @ ${entry.node}` : name;
}

/**
 * The look of each event kind that is not a call: an icon, a short label and a tone
 * (a CSS class suffix) for the log's badge and the sequence view.
 */
export const KIND_LOOK = {
  send: { icon: "→", label: "send", tone: "send" },
  send_to_non_existing: { icon: "⇥", label: "send ✕", tone: "bad" },
  receive: { icon: "←", label: "receive", tone: "receive" },
  timeout: { icon: "⏱", label: "after timeout", tone: "receive" },
  spawn: { icon: "+", label: "spawn", tone: "life" },
  spawned: { icon: "+", label: "spawned", tone: "life" },
  exit: { icon: "✕", label: "exit", tone: "exit" },
  link: { icon: "⟷", label: "link", tone: "link" },
  unlink: { icon: "⇹", label: "unlink", tone: "link" },
  getting_linked: { icon: "⟷", label: "linked by", tone: "link" },
  getting_unlinked: { icon: "⇹", label: "unlinked by", tone: "link" },
  register: { icon: "@", label: "register", tone: "name" },
  unregister: { icon: "@", label: "unregister", tone: "name" },
  return_to: { icon: "↩", label: "return to", tone: "call" },
  return: { icon: "↩", label: "return", tone: "call" },
  exception: { icon: "!", label: "raise", tone: "bad" },
};

/** The look of a kind (`null` for calls, which need no badge). */
export function kindLook(kind) {
  if (kind === "call") return null;
  return KIND_LOOK[kind] || { icon: "•", label: kind || "event", tone: "call" };
}

/** Message and process kinds (not calls, returns or exceptions). */
export function isMessageKind(kind) {
  return kind != null && !["call", "return", "exception", "return_to"].includes(kind);
}

/** Normal exit reasons, shown calmer than crashes. */
export function isNormalExit(reason) {
  return reason === ":normal" || reason === ":shutdown" || /^\{:shutdown, /.test(reason || "");
}

/** The other process of an event, by name when known. */
export function peerLabel(entry) {
  return entry.peer_name || entry.peer || "";
}

/** The main text of a message or process event, after its badge (no kind label). */
export function eventBody(entry) {
  // a return_to without a function: the process's first call returned
  if (entry.kind === "return_to") return functionLabel(entry) || "(no function)";
  if (entry.kind === "return" || entry.kind === "exception") return functionLabel(entry);
  if (entry.data != null) return entry.data;
  // link and friends: the other process is the subject
  return peerLabel(entry);
}

/** What an entry shows as its main text. */
export function entryText(entry) {
  if (entry.call) return entry.call;
  if (entry.kind === "return" || entry.kind === "exception") return functionLabel(entry);
  const look = kindLook(entry.kind);
  return [look ? look.label : entry.kind, eventBody(entry)].filter(Boolean).join(" ");
}

/**
 * The arrow before a returned value, as the console writes it (KinoTrace.Render, which
 * the payload's terms come from): the log, the call tree, the sequence and the text
 * export read `-> value` as the printed trace does.
 */
export const RESULT_ARROW = "->";

/** A returned value (the payload's rendered `result`) after its arrow. */
export function resultText(result) {
  return `${RESULT_ARROW} ${result ?? ""}`;
}

/**
 * What an entry shows as its outcome: `-> value` or the exception banner for calls,
 * `→ receiver` for sends, `→ child` for spawns.
 */
export function entryOutcome(entry) {
  if (entry.exception != null) return entry.exception;
  if (entry.result != null) return resultText(entry.result);
  if (entry.peer && entry.data != null && ["send", "send_to_non_existing", "spawn"].includes(entry.kind)) {
    return `→ ${peerLabel(entry)}`;
  }
  if (entry.peer && entry.kind === "spawned") return `← ${peerLabel(entry)}`;
  return "";
}

/**
 * Where a call came from, when the trace recorded its caller (`caller: true` or
 * `caller: :line`): `from Mod.fun/1` or `from Mod.fun/1 at lib/x.ex:12`; else "".
 */
export function callerText(entry) {
  return entry.caller ? `from ${entry.caller}` : "";
}

/** One entry as a plain text line (used for "copy as text"), indented by depth. */
export function entryLine(entry) {
  const caller = callerText(entry);
  const text = entryText(entry) + (caller ? ` (${caller})` : "");
  const parts = [formatTime(entry.time), whoWithNode(entry), "  ".repeat(entry.depth || 0) + text];
  const outcome = entryOutcome(entry);
  if (outcome) parts.push(outcome);
  if (entry.duration != null) parts.push(`(${formatDuration(entry.duration)})`);
  return parts.filter((p) => p !== "").join(" ");
}
