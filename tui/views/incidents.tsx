/** Incidents (recovery, store): `a` acknowledges the selected one; acknowledged ones are dimmed. */
import React from "react";
import { ago, shortId } from "../format.js";
import type { IncidentInfo } from "../source.js";
import { Table, type Column } from "./table.js";

export function IncidentsView(p: { rows: readonly IncidentInfo[]; selected: number; now: number; width: number; height: number }): React.ReactElement {
  const cols: Array<Column<IncidentInfo>> = [
    { title: "ID", width: 10, value: (i) => shortId(i.id, 10) },
    { title: "KIND", width: 14, value: (i) => i.kind, color: (i) => (i.acknowledged ? undefined : "yellow") },
    { title: "CLIENT", width: 12, value: (i) => i.clientId || "-" },
    { title: "COMMAND", width: 10, hideBelow: 70, value: (i) => (i.uuid ? shortId(i.uuid, 10) : "-") },
    { title: "WHEN", width: 9, value: (i) => ago(i.at, p.now) },
    { title: "ACK", width: 3, value: (i) => (i.acknowledged ? "yes" : "no") },
    { title: "DETAIL", width: "flex", min: 10, value: (i) => i.detail },
  ];
  return <Table rows={p.rows} columns={cols} selected={p.selected} width={p.width} height={p.height} empty="no incidents" dim={(i) => i.acknowledged} />;
}
