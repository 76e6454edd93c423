/** Commands of one client (or all): state, revision, outcome, times, program. */
import type React from "react";
import { ago, shortId, stateColor } from "../format.js";
import type { CommandInfo } from "../source.js";
import { durationText } from "../../client/model.js";
import { Table, type Column } from "./table.js";

export function outcomeText(c: CommandInfo): string {
  if (c.exitCode !== null) return `exit ${c.exitCode}`;
  if (c.signalName) return c.signalName;
  return "";
}

export function commandColumns(now: number, allClients: boolean): Array<Column<CommandInfo>> {
  const cols: Array<Column<CommandInfo>> = [
    { title: "ID", width: 10, value: (c) => shortId(c.uuid, 10) },
    { title: "STATE", width: 11, value: (c) => c.state, color: (c) => stateColor(c.state) },
    { title: "REV", width: 3, align: "right", value: (c) => String(c.revision) },
    { title: "EXIT", width: 9, value: (c) => outcomeText(c) || "-" },
    { title: "CREATED", width: 10, hideBelow: 70, value: (c) => ago(c.createdAt, now) },
    { title: "DURATION", width: 9, align: "right", hideBelow: 80, value: (c) => durationText(c, now) },
    { title: "EVENTS", width: 6, align: "right", hideBelow: 90, value: (c) => String(c.storedThrough) },
    { title: "PROGRAM", width: "flex", min: 10, value: (c) => c.program },
    { title: "REASON", width: "flex", min: 8, hideBelow: 120, value: (c) => c.reason },
  ];
  if (allClients) cols.splice(1, 0, { title: "CLIENT", width: 12, value: (c) => c.clientId });
  return cols;
}

export interface CommandsViewProps {
  clientId: string | null;
  rows: readonly CommandInfo[];
  selected: number;
  now: number;
  width: number;
  height: number;
}

export function CommandsView(p: CommandsViewProps): React.ReactElement {
  return (
    <Table
      rows={p.rows}
      columns={commandColumns(p.now, p.clientId === null)}
      selected={p.selected}
      width={p.width}
      height={p.height}
      empty={p.clientId === null ? "no commands yet (s to submit one)" : `no commands for ${p.clientId} yet (s to submit one)`}
    />
  );
}
