/**
 * Sim mode: where the cursor is in the recorded run, a bar with the failure
 * marked, the active filters, and the last timeline lines up to the cursor.
 */
import type React from "react";
import { Box, Text } from "ink";
import { clip, fit } from "../format.js";
import type { TimelineControl } from "../source.js";

export const TIMELINE_LINES = 3;
export const TIMELINE_HEIGHT = 2 + TIMELINE_LINES;

const secs = (ms: number): string => `${(ms / 1000).toFixed(3)}s`;

export function TimelineBar(p: { timeline: TimelineControl; width: number }): React.ReactElement {
  const t = p.timeline;
  const last = Math.max(0, t.frames - 1);
  const at = t.frames > 0 ? t.timeOf(t.index) : 0;
  const head = [
    `frame ${t.frames ? t.index + 1 : 0}/${t.frames}${t.recording ? " (recording…)" : ""}`,
    `t=${secs(at)} of ${secs(t.endTime)}`,
    t.playing ? "▶ playing" : "❚❚ paused",
    t.filter.node ? `node=${t.filter.node}` : "",
    t.filter.command ? `command~${t.filter.command}` : "",
    t.failure ? `FAIL at ${secs(t.failure.at)} [${t.failure.oracle}]` : t.recording ? "" : "seed ok",
  ]
    .filter(Boolean)
    .join(" · ");
  const barW = Math.max(10, p.width - 2);
  const pos = (frame: number): number => (last === 0 ? 0 : Math.round((frame / last) * (barW - 1)));
  const cells = Array.from({ length: barW }, () => "─");
  if (t.failure) cells[pos(t.failure.frame)] = "✗";
  cells[pos(t.index)] = "●";
  const lines = t.recentLines(TIMELINE_LINES);
  const shown = [...lines];
  while (shown.length < TIMELINE_LINES) shown.unshift("");
  return (
    <Box flexDirection="column" width={p.width} height={TIMELINE_HEIGHT}>
      <Text color={t.failure ? "red" : "green"} bold>
        {fit(head, p.width)}
      </Text>
      <Text>
        [<Text color="cyan">{cells.join("")}</Text>]
      </Text>
      {shown.map((l, i) => (
        <Text key={i} dimColor={i < shown.length - 1}>
          {l === "" ? " " : clip(l, p.width)}
        </Text>
      ))}
    </Box>
  );
}
