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

/** Who ran the event: the registered name when there is one, else the pid. */
export function who(entry) {
  return entry.name || entry.pid || "";
}

/** What an entry shows as its main text. */
export function entryText(entry) {
  if (entry.call) return entry.call;
  if (entry.kind === "return" || entry.kind === "exception") return entry.mfa || "";
  return [entry.kind, entry.data, entry.peer && `→ ${entry.peer}`].filter(Boolean).join(" ");
}

/** What an entry shows as its outcome: `-> value` or the exception banner. */
export function entryOutcome(entry) {
  if (entry.exception != null) return entry.exception;
  if (entry.result != null) return `→ ${entry.result}`;
  return "";
}

/** One entry as a plain text line (used for "copy as text"), indented by depth. */
export function entryLine(entry) {
  const parts = [formatTime(entry.time), who(entry), "  ".repeat(entry.depth || 0) + entryText(entry)];
  const outcome = entryOutcome(entry);
  if (outcome) parts.push(outcome);
  if (entry.duration != null) parts.push(`(${formatDuration(entry.duration)})`);
  return parts.filter((p) => p !== "").join(" ");
}
