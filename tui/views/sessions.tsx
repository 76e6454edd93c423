/** Sessions: one row per client (or simulated host): link state, instance, generation, activity, load, window and budget use. */
import type React from "react";
import { formatLabels } from "../../core/server/labels.js";
import { ago, linkColor, shortId, usage } from "../format.js";
import type { FleetSnapshot, SessionInfo } from "../source.js";
import { Table, type Column } from "./table.js";

export function sessionColumns(now: number): Array<Column<SessionInfo>> {
  return [
    { title: "CLIENT", width: "flex", min: 10, value: (s) => (s.kind === "agent" ? s.key : `${s.key} (${s.kind})`) },
    { title: "STATE", width: 11, value: (s) => s.link, color: (s) => linkColor(s.link) },
    { title: "INSTANCE", width: 10, hideBelow: 70, value: (s) => shortId(s.instanceId, 10) },
    { title: "GEN", width: 4, align: "right", value: (s) => String(s.generation) },
    { title: "LAST ACTIVITY", width: 13, hideBelow: 60, value: (s) => ago(s.lastActivity, now) },
    { title: "RUN", width: 5, align: "right", value: (s) => `${s.running}${s.maxRunning !== null ? `/${s.maxRunning}` : ""}` },
    { title: "QUEUE", width: 6, align: "right", value: (s) => `${s.queued}${s.maxQueued !== null ? `/${s.maxQueued}` : ""}` },
    { title: "WINDOW", width: 6, align: "right", hideBelow: 90, value: (s) => usage(s.window) },
    { title: "BUDGET", width: 6, align: "right", hideBelow: 90, value: (s) => usage(s.budget) },
    {
      title: "DETAIL",
      width: "flex",
      min: 8,
      hideBelow: 110,
      value: (s) =>
        [
          s.draining ? "draining" : "",
          s.labels ? formatLabels(s.labels) : "",
          s.detail,
          s.authorizedInstance ? `authorized ${shortId(s.authorizedInstance, 10)}` : "",
        ]
          .filter(Boolean)
          .join("; "),
    },
  ];
}

export interface SessionsViewProps {
  fleet: FleetSnapshot;
  rows: readonly SessionInfo[];
  selected: number;
  width: number;
  height: number;
}

export function SessionsView(p: SessionsViewProps): React.ReactElement {
  return (
    <Table
      rows={p.rows}
      columns={sessionColumns(p.fleet.now)}
      selected={p.selected}
      width={p.width}
      height={p.height}
      empty={p.fleet.status.connected ? "no clients have registered yet" : "waiting for the server…"}
    />
  );
}
