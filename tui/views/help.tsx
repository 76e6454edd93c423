/** The help line (keys for where you are) and the full key list (`?`). */
import type React from "react";
import { Box, Text } from "ink";
import { clip, fit } from "../format.js";

export type HelpContext = "sessions" | "commands" | "output" | "claims" | "incidents" | "jobs";

const LINES: Record<HelpContext, string> = {
  sessions: "↑↓/jk move · enter commands · s submit · tab/1-5 views · ? help · q quit",
  commands: "↑↓ move · enter output · s submit · c cancel · x signal · i stdin · D close stdin · a all clients · esc back · q quit",
  output: "↑↓/jk PgUp/PgDn scroll · G follow · c cancel · x signal · i stdin · D close stdin · esc back · q quit",
  claims: "↑↓ move · a/enter authorize the claiming instance (once) · d dismiss the claim · tab views · q quit",
  incidents: "↑↓ move · a/enter acknowledge · h show acknowledged · tab views · q quit",
  jobs: "↑↓ move (the selected job's clients below) · c cancel the job · tab views · q quit",
};

export const SIM_KEYS = ", . step · [ ] ±10s · < > start/end · space play · F failure · n node · / command";

export function helpLine(ctx: HelpContext, sim: boolean): string {
  return sim ? `${SIM_KEYS} · ${LINES[ctx]}` : LINES[ctx];
}

export function HelpLine(p: { ctx: HelpContext; sim: boolean; width: number }): React.ReactElement {
  return <Text dimColor>{fit(helpLine(p.ctx, p.sim), p.width)}</Text>;
}

const ALL: Array<[string, string]> = [
  ["tab / shift-tab, 1-5", "switch view: sessions, commands, claims, incidents, jobs"],
  ["↑ ↓ / j k", "move the selection (scroll in the output pane)"],
  ["PgUp PgDn, g G, Home End", "page, first, last (output: g loads from the start, G jumps to the end and follows)"],
  ["enter", "drill in: session → its commands → a command's output"],
  ["esc", "back (output → commands → sessions); cancels a prompt"],
  ["s", "submit a command (client, shell command line, stdin open)"],
  ["c / x", "cancel the selected command (jobs: the job) / send it a signal"],
  ["i / D", "write a line to its stdin (ctrl-n: no newline) / close its stdin"],
  ["a", "authorize a claim · acknowledge an incident · all clients (commands)"],
  ["d", "dismiss a claim without authorizing it"],
  ["h", "incidents: show acknowledged ones too"],
  ["q, ctrl-c", "quit"],
  ["sim: , .", "step one frame back / forward"],
  ["sim: [ ] < >", "jump 10 s back / forward; start / end"],
  ["sim: space, F", "play / pause; jump to the failure"],
  ["sim: n, /", "cycle the node filter; filter by command id"],
];

export function HelpOverlay(p: { width: number; height: number }): React.ReactElement {
  const rows = ALL.slice(0, Math.max(0, p.height - 2));
  return (
    <Box flexDirection="column" width={p.width} height={p.height}>
      <Text bold>{fit("Keys (? or esc closes)", p.width)}</Text>
      {rows.map(([k, v], i) => (
        <Text key={i}>
          <Text color="cyan">{fit(k, 26)}</Text>
          {clip(v, Math.max(0, p.width - 26))}
        </Text>
      ))}
    </Box>
  );
}
