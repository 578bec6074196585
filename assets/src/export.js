// The trace widget's export: the log as JSON (with the status, patterns and counters) or
// as text, one line per entry; a download and a copy to the clipboard; a trace file's
// bytes as a download (a recorder's snapshot).

import { h } from "./dom.js";
import { entryLine } from "./format.js";

/** The JSON export of the entries (LogModel's, without its search keys). */
export function exportData({ status, patterns, counters, entries }) {
  return {
    exported_at: new Date().toISOString(),
    status,
    patterns,
    counters,
    events: entries.map(({ search, ...entry }) => entry),
  };
}

/** The text export: one line per entry. */
export function exportText(entries) {
  return entries.map(entryLine).join("\n");
}

/** Offers `data` as a JSON file download. */
export function downloadJson(data) {
  offer(new Blob([JSON.stringify(data, null, 2)], { type: "application/json" }), `trace-${Date.now()}.json`);
}

/** The bytes of base64 `data`. */
export function decodeBase64(data) {
  const text = atob(data);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

/** Offers the bytes of base64 `data` (a trace file, as Kino.Trace.save/2 writes it) as a download named `name`. */
export function downloadBytes(data, name) {
  offer(new Blob([decodeBase64(data)], { type: "application/octet-stream" }), name);
}

function offer(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = h("a", { href: url, download: name });
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/**
 * Copies `text` to the clipboard, through a hidden textarea where the clipboard API is
 * missing or refused. Resolves to whether it was copied.
 */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (_error) {
    const area = h("textarea", { style: "position:fixed;opacity:0" });
    area.value = text;
    document.body.appendChild(area);
    area.select();
    let copied = false;
    try {
      copied = document.execCommand("copy") === true;
    } catch (_refused) {
      copied = false;
    }
    area.remove();
    return copied;
  }
}
