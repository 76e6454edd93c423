/**
 * How the operator tools spell events that are not output bytes. The CLI
 * prints these on stderr (`logs`, `run --follow`), the TUI inline in its
 * output pane; both use the same words so an operator recognises them.
 *
 * A shortened stream is never silent: every truncation names its cause, its
 * byte ranges and (for server retention) its event range (R-O5, R-O7), and
 * an incomplete capture says which pipes were not drained (R-O8).
 */
import type { ByteSpan, OutputItem, TruncationSource } from "./model.js";

export function humanBytes(n: number): string {
  if (!Number.isFinite(n)) return "?";
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v >= 100 ? v.toFixed(0) : v.toFixed(1)} ${units[i]}`;
}

const CAUSE_TEXT: Record<TruncationSource, string> = {
  "server-retention": "removed by server retention",
  "agent-watermark": "dropped by the agent (raw-output high watermark)",
  "agent-budget": "dropped by the agent (output budget reached)",
  unknown: "removed (cause not given)",
};

function spanText(r: ByteSpan): string {
  return r.length > 0 ? `${r.stream} bytes ${r.offset}–${r.offset + r.length - 1}` : `${r.stream} (0 bytes)`;
}

/** `[… 1.2 MiB of stdout removed by server retention: events 12–40; stdout bytes 0–1258290 …]` */
export function truncationText(m: Extract<OutputItem, { kind: "truncation" }>): string {
  const total = m.ranges.reduce((n, r) => n + r.length, 0);
  const streams = [...new Set(m.ranges.map((r) => r.stream))];
  const what = streams.length === 0 ? "output" : streams.join("+");
  const parts: string[] = [];
  if (m.events) parts.push(m.events.first === m.events.last ? `event ${m.events.first}` : `events ${m.events.first}–${m.events.last}`);
  else parts.push(m.cause === "server-retention" ? "no event range" : `at event ${m.seq}, never sequenced`);
  if (m.ranges.length > 0) parts.push(m.ranges.map(spanText).join(", "));
  return `[… ${humanBytes(total)} of ${what} ${CAUSE_TEXT[m.cause]}: ${parts.join("; ")} …]`;
}

/** `[! output incomplete at event 7: stdout not drained to EOF (descendant kept the pipe) …]` */
export function incompleteText(m: Extract<OutputItem, { kind: "incomplete" }>): string {
  const streams = m.streams.length ? m.streams.join("+") : "output";
  return `[! output incomplete at event ${m.seq}: ${streams} not drained to EOF${m.reason ? ` (${m.reason})` : ""}; nothing after this was captured !]`;
}

/** Marker for bytes a viewer let go of (TUI scrollback bound): not a protocol marker, said so. */
export function viewerElisionText(bytes: number, items: number, uuid: string): string {
  return `[… ${humanBytes(bytes)} in ${items} earlier events not kept by this viewer; \`rvbox logs ${uuid}\` prints everything …]`;
}

/** `[… 96 KiB of stdout missing before event 19: stdout bytes 655360–753663; no marker was sent for them …]` */
export function gapText(m: Extract<OutputItem, { kind: "gap" }>): string {
  return `[… ${humanBytes(m.length)} of ${m.stream} missing before event ${m.seq}: ${spanText(m)}; no marker was sent for them …]`;
}

export function isMarker(it: OutputItem): boolean {
  return it.kind === "truncation" || it.kind === "incomplete" || it.kind === "gap";
}

/** One line for a non-output event; null for output. */
export function eventText(it: OutputItem): string | null {
  switch (it.kind) {
    case "output":
      return null;
    case "truncation":
      return truncationText(it);
    case "incomplete":
      return incompleteText(it);
    case "gap":
      return gapText(it);
    case "lifecycle": {
      const how = it.exitCode !== null ? `exit ${it.exitCode}` : it.signalName ? it.signalName : "";
      const extra = [how, it.reason, it.error].filter((s) => s !== "").join("; ");
      return `── ${it.state}${extra ? ` (${extra})` : ""} · event ${it.seq}, revision ${it.revision} ──`;
    }
    case "stdin_ack":
      return `── stdin acknowledged through write ${it.writeSeq}${it.closed ? ", closed" : ""}${it.failure ? ` (failed: ${it.failure})` : ""} · event ${it.seq} ──`;
    case "signal_result":
      return `── signal ${it.signal} ${it.delivered ? "delivered" : "not delivered"}${it.detail ? ` (${it.detail})` : ""} · event ${it.seq}, revision ${it.revision} ──`;
    case "script_upload":
      return `── script upload ${humanBytes(it.receivedBytes)}${it.complete ? ", complete" : ""} · event ${it.seq} ──`;
  }
}
