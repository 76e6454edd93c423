/**
 * The live output pane of one command: stdout and stderr interleaved in event
 * order (stderr in red), with every truncation / incomplete marker shown
 * inline, highlighted and never cut off (marker lines wrap), plus lifecycle,
 * stdin and signal events as dim separator lines. Follows the tail until the
 * operator scrolls up; `G` / `f` follows again.
 */
import type React from "react";
import { Box, Text } from "ink";
import { clip, fit, shortId, stateColor } from "../format.js";
import type { OutputLine, OutputSnapshot } from "../source.js";
import { outcomeText } from "./commands.js";
import { durationText, type Lifecycle } from "../../client/model.js";

const TERMINAL: ReadonlySet<Lifecycle> = new Set(["succeeded", "failed", "rejected", "cancelled", "interrupted", "expired"]);

function wrap(text: string, width: number): string[] {
  if (width <= 0) return [];
  const out: string[] = [];
  for (let i = 0; i < text.length; i += width) out.push(text.slice(i, i + width));
  return out.length ? out : [""];
}

const wraps = (l: OutputLine): boolean => l.kind === "marker" || l.kind === "viewer";

function rowsOf(l: OutputLine, width: number): string[] {
  return wraps(l) ? wrap(l.text, width) : [clip(l.text, width)];
}

export interface OutputViewProps {
  snapshot: OutputSnapshot;
  /** First line shown; null: follow the tail. */
  top: number | null;
  width: number;
  height: number;
}

/** Which lines fill `body` rows: from `top` down, or (following) up from the last line. */
export function visibleLines(
  lines: readonly OutputLine[],
  top: number | null,
  body: number,
  width: number,
): { start: number; rows: Array<{ line: OutputLine; text: string }> } {
  const rows: Array<{ line: OutputLine; text: string }> = [];
  if (top === null) {
    let i = lines.length - 1;
    const acc: Array<Array<{ line: OutputLine; text: string }>> = [];
    let n = 0;
    for (; i >= 0 && n < body; i--) {
      const r = rowsOf(lines[i]!, width).map((text) => ({ line: lines[i]!, text }));
      acc.push(r);
      n += r.length;
    }
    for (let k = acc.length - 1; k >= 0; k--) rows.push(...acc[k]!);
    // A wrapped marker at the top may not fit whole: keep its end (the last rows).
    return { start: i + 1, rows: rows.slice(Math.max(0, rows.length - body)) };
  }
  const start = Math.max(0, Math.min(top, lines.length - 1));
  for (let i = start; i < lines.length && rows.length < body; i++) rows.push(...rowsOf(lines[i]!, width).map((text) => ({ line: lines[i]!, text })));
  return { start, rows: rows.slice(0, body) };
}

function lineColor(l: OutputLine): { color?: string; dim?: boolean; bold?: boolean } {
  switch (l.kind) {
    case "stderr":
      return { color: "red" };
    case "marker":
      return { color: "yellow", bold: true };
    case "viewer":
      return { color: "magenta", bold: true };
    case "event":
      return { color: "cyan", dim: true };
    default:
      return {};
  }
}

export function OutputView(p: OutputViewProps): React.ReactElement {
  const s = p.snapshot;
  const c = s.command;
  const title = c
    ? `${shortId(c.uuid, 13)} on ${c.clientId} · ${c.state}${outcomeText(c) ? ` (${outcomeText(c)})` : ""}${c.startedAt !== null ? ` · ${durationText(c, Date.now())}` : ""} · rev ${c.revision} · ${c.program}`
    : `${s.uuid}`;
  const markers = s.markers;
  const w = s.window;
  const ended = s.finished || (c !== null && TERMINAL.has(c.state));
  // A windowed source says which events the pane holds (of how many stored), and when its reader waits.
  const held = w ? `events ${w.before + 1}–${w.next - 1}${c && c.storedThrough > 0 ? ` of ${Math.max(c.storedThrough, w.next - 1)}` : ""}` : "";
  const status = [
    ended ? "ended" : "live",
    w?.paused ? `paused: ${w.full ? "pane full" : "rest not loaded"} (↓ reads on · G end)` : p.top === null ? "following" : "scrolled (G: follow)",
    `${w ? w.held.lines : s.lines.length} lines`,
    held,
    markers ? `${markers} marker${markers > 1 ? "s" : ""}` : "",
    s.error ? `error: ${s.error}` : "",
  ]
    .filter(Boolean)
    .join(" · ");
  const body = Math.max(1, p.height - 2);
  const { rows } = visibleLines(s.lines, p.top, body, p.width);
  const out = rows.map((r, i) => {
    const st = lineColor(r.line);
    return (
      <Text key={i} color={st.color} dimColor={st.dim} bold={st.bold}>
        {r.text === "" ? " " : r.text}
      </Text>
    );
  });
  if (rows.length === 0)
    out.push(
      <Text key="none" dimColor>
        {s.error ? `cannot stream the output: ${s.error}` : "no output yet"}
      </Text>,
    );
  while (out.length < body) out.push(<Text key={`p${out.length}`}> </Text>);
  return (
    <Box flexDirection="column" width={p.width} height={p.height}>
      <Text bold color={c ? stateColor(c.state) : undefined}>
        {fit(title, p.width)}
      </Text>
      {out}
      <Text dimColor>{fit(status, p.width)}</Text>
    </Box>
  );
}
