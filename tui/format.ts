/** Small text helpers for fixed-width rows: every row is exactly `width` columns, never wrapped. */
import { humanBytes } from "../client/markers.js";
import type { Lifecycle, Usage } from "./source.js";

export { humanBytes };

/** Pad or cut `s` to exactly `w` columns; a cut ends in "…". */
export function fit(s: string, w: number): string {
  if (w <= 0) return "";
  if (s.length === w) return s;
  if (s.length < w) return s + " ".repeat(w - s.length);
  return w === 1 ? "…" : `${s.slice(0, w - 1)}…`;
}

/**
 * `s` in lines of at most `w` characters, broken at spaces (a word longer
 * than a line is cut), at most `maxLines` lines: the last one ends in "…"
 * when something did not fit. Each line is padded to `w` (as fit).
 */
export function wrap(s: string, w: number, maxLines: number): string[] {
  if (w <= 0 || maxLines <= 0) return [];
  const lines: string[] = [];
  let rest = s.replace(/\s+/g, " ").trim();
  while (rest.length > 0 && lines.length < maxLines) {
    if (lines.length === maxLines - 1 || rest.length <= w) {
      lines.push(fit(rest, w));
      rest = "";
      break;
    }
    const cut = rest.lastIndexOf(" ", w);
    const at = cut > 0 ? cut : w;
    lines.push(fit(rest.slice(0, at), w));
    rest = rest.slice(at).trimStart();
  }
  return lines.length > 0 ? lines : [fit("", w)];
}

/** Right-aligned fit. */
export function fitRight(s: string, w: number): string {
  if (w <= 0) return "";
  if (s.length >= w) return fit(s, w);
  return " ".repeat(w - s.length) + s;
}

/** Cut without padding. */
export function clip(s: string, w: number): string {
  return s.length <= w ? s : w <= 1 ? "…".slice(0, w) : `${s.slice(0, w - 1)}…`;
}

export function ago(t: number | null, now: number): string {
  if (t === null) return "-";
  const s = Math.round((now - t) / 1000);
  if (s < 0) return `in ${dur(-s)}`;
  return s === 0 ? "now" : `${dur(s)} ago`;
}

function dur(s: number): string {
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60 ? `${s % 60}s` : ""}`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d`;
}

export function clock(t: number | null): string {
  if (t === null) return "-";
  return new Date(t).toISOString().slice(11, 19);
}

export function usage(u: Usage | null): string {
  if (!u || u.limit <= 0) return "-";
  return `${Math.round((100 * u.used) / u.limit)}%`;
}

export function shortId(id: string, n = 8): string {
  return id.length <= n ? id : id.slice(0, n);
}

export type Color = "green" | "red" | "yellow" | "cyan" | "magenta" | "blue" | "gray" | "white" | undefined;

export function stateColor(s: Lifecycle): Color {
  switch (s) {
    case "succeeded":
      return "green";
    case "failed":
    case "rejected":
      return "red";
    case "running":
      return "cyan";
    case "cancelled":
    case "expired":
      return "magenta";
    case "interrupted":
      return "yellow";
    case "queued":
    case "dispatched":
    case "accepted":
      return "blue";
    default:
      return undefined;
  }
}

export function linkColor(l: string): Color {
  switch (l) {
    case "connected":
      return "green";
    case "offline":
    case "down":
      return "red";
    case "backoff":
      return "yellow";
    default:
      return "cyan";
  }
}
