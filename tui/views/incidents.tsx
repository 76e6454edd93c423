/** Incidents (recovery, store): `a` acknowledges the selected one; acknowledged ones are dimmed. */
import type React from "react";
import { Box, Text } from "ink";
import { ago, shortId } from "../format.js";
import type { IncidentInfo } from "../source.js";
import { Table, type Column } from "./table.js";

/** Incidents a client had counted instead of stored (the server's per-client and total bounds). */
export interface DroppedIncidents {
  clientId: string;
  count: number;
}

export function IncidentsView(p: {
  rows: readonly IncidentInfo[];
  dropped?: readonly DroppedIncidents[];
  selected: number;
  now: number;
  width: number;
  height: number;
}): React.ReactElement {
  const cols: Array<Column<IncidentInfo>> = [
    { title: "ID", width: 10, value: (i) => shortId(i.id, 10) },
    { title: "KIND", width: 14, value: (i) => i.kind, color: (i) => (i.acknowledged ? undefined : "yellow") },
    { title: "CLIENT", width: 12, value: (i) => i.clientId || "-" },
    { title: "COMMAND", width: 10, hideBelow: 70, value: (i) => (i.uuid ? shortId(i.uuid, 10) : "-") },
    { title: "WHEN", width: 10, value: (i) => ago(i.at, p.now) },
    { title: "ACK", width: 3, value: (i) => (i.acknowledged ? "yes" : "no") },
    { title: "DETAIL", width: "flex", min: 10, value: (i) => i.detail },
  ];
  const dropped = (p.dropped ?? []).filter((d) => d.count > 0);
  const table = (
    <Table
      rows={p.rows}
      columns={cols}
      selected={p.selected}
      width={p.width}
      height={p.height - (dropped.length > 0 ? 1 : 0)}
      empty="no incidents"
      dim={(i) => i.acknowledged}
    />
  );
  if (dropped.length === 0) return table;
  const total = dropped.reduce((n, d) => n + d.count, 0);
  const line = `${total} not stored (incident bounds): ${dropped.map((d) => `${d.clientId} ${d.count}`).join(", ")}`;
  return (
    <Box flexDirection="column" width={p.width} height={p.height}>
      <Text color="red" wrap="truncate-end">
        {line}
      </Text>
      {table}
    </Box>
  );
}
