/** Pending identity claims (R-F4): a different instance tried a live client id; `a` authorizes it once (R-F5). */
import type React from "react";
import { ago } from "../format.js";
import type { ClaimInfo } from "../source.js";
import { Table, type Column } from "./table.js";

export function ClaimsView(p: { rows: readonly ClaimInfo[]; selected: number; now: number; width: number; height: number }): React.ReactElement {
  const cols: Array<Column<ClaimInfo>> = [
    { title: "CLIENT", width: "flex", min: 10, value: (c) => c.clientId },
    { title: "CLAIMING INSTANCE", width: "flex", min: 12, value: (c) => c.instanceId, color: () => "yellow" },
    { title: "CURRENT INSTANCE", width: "flex", min: 12, hideBelow: 70, value: (c) => c.currentInstanceId },
    { title: "TRIES", width: 5, align: "right", value: (c) => String(c.attempts) },
    { title: "SINCE", width: 10, value: (c) => ago(c.at, p.now) },
  ];
  return <Table rows={p.rows} columns={cols} selected={p.selected} width={p.width} height={p.height} empty="no pending identity claims" />;
}
