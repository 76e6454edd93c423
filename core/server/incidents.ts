// Incidents (R-D11): recovery and store incidents for operators, bounded per
// client and in total; what does not fit is counted durably, never lost.

import { Code, assert } from "../errors.js";
import { MAX_INCIDENTS_KEPT, MAX_OPEN_INCIDENTS, MAX_OPEN_INCIDENTS_PER_CLIENT } from "../limits.js";
import type { ControlRequest, Incident, ServerState } from "./server-types.js";
import {
  type ServerTables,
  generationFloorOf,
  incidentDelete,
  incidentDropRecord,
  incidentKey,
  incidentRecord,
  incidentsDroppedOf,
  incidentsDroppedRecord,
  rowsOf,
} from "./store.js";
import { type ServerCtx, reply, replyError } from "./io.js";

/**
 * Record an incident, within bounds: at most MAX_OPEN_INCIDENTS_PER_CLIENT
 * open per client and MAX_OPEN_INCIDENTS open in all. What does not fit is
 * counted (per client and in total, durably), never silently lost. With the
 * total full, a client holding fewer open incidents than the heaviest client
 * takes the place of that client's newest one, so one client's flood never
 * hides another client's incident (R-D11).
 */
export function openIncident(st: ServerState, ctx: ServerCtx, clientId: string, uuid: string, kind: string, detail: string): void {
  const mine = st.openByClient.get(clientId) ?? 0;
  if (mine >= MAX_OPEN_INCIDENTS_PER_CLIENT) return dropIncident(st, ctx, clientId, uuid, kind, "per-client bound");
  if (st.openIncidents >= MAX_OPEN_INCIDENTS) {
    let heavy = "";
    let most = 0;
    for (const [id, n] of st.openByClient) {
      if (n > most) {
        most = n;
        heavy = id;
      }
    }
    if (most <= mine + 1) return dropIncident(st, ctx, clientId, uuid, kind, "total bound");
    let victim: Incident | undefined;
    for (const i of st.incidents.values()) if (!i.acknowledged && i.clientId === heavy) victim = i;
    assert(victim !== undefined, `no open incident of ${heavy} to make room`);
    st.incidents.delete(victim.id);
    noteOpen(st, heavy, -1);
    ctx.persist(incidentDelete(victim.id));
    dropIncident(st, ctx, heavy, victim.uuid, victim.kind, `evicted for ${clientId}'s incident (total bound)`);
  }
  if (st.incidents.size >= MAX_INCIDENTS_KEPT) {
    for (const [id, i] of st.incidents) {
      if (!i.acknowledged) continue;
      st.incidents.delete(id);
      ctx.persist(incidentDelete(id));
      break;
    }
  }
  st.incidentSeq++;
  const inc: Incident = { id: incidentKey(st.incidentSeq), clientId, uuid, kind, detail, at: ctx.wall, acknowledged: false };
  st.incidents.set(inc.id, inc);
  noteOpen(st, clientId, 1);
  ctx.persist(incidentRecord(inc));
  ctx.emit({ type: "trace", event: "incident", detail: { id: inc.id, client: clientId, uuid, kind, detail } });
}

function noteOpen(st: ServerState, clientId: string, delta: number): void {
  const n = (st.openByClient.get(clientId) ?? 0) + delta;
  if (n === 0) st.openByClient.delete(clientId);
  else st.openByClient.set(clientId, n);
  st.openIncidents += delta;
}

function dropIncident(st: ServerState, ctx: ServerCtx, clientId: string, uuid: string, kind: string, why: string): void {
  let d = st.incidentDrops.get(clientId);
  if (!d) st.incidentDrops.set(clientId, (d = { clientId, count: 0, lastAt: 0, lastKind: "" }));
  d.count++;
  d.lastAt = ctx.wall; // a timestamp operators read (ListIncidents last_time), not a deadline
  d.lastKind = kind;
  st.incidentsDropped++;
  st.dropsDirty.add(clientId);
  ctx.emit({ type: "trace", event: "incident_dropped", detail: { client: clientId, kind, uuid, why } });
}

/** Persist the drop counters this step changed: one record per client and the total, however many were dropped. */
export function flushIncidentDrops(st: ServerState, ctx: ServerCtx): void {
  if (st.dropsDirty.size === 0) return;
  for (const id of st.dropsDirty) {
    ctx.persist(incidentDropRecord(id, st.incidentDrops.get(id)));
  }
  st.dropsDirty.clear();
  ctx.persist(incidentsDroppedRecord(st.incidentsDropped));
}

/** Rebuild the incident indexes and drop counters (after the `incident` table is loaded). */
export function restoreIncidentIndex(st: ServerState, tables: ServerTables): void {
  for (const i of st.incidents.values()) if (!i.acknowledged) noteOpen(st, i.clientId, 1);
  for (const [id, n] of st.openByClient) if (n > MAX_OPEN_INCIDENTS_PER_CLIENT) st.openOverByClient.set(id, n);
  for (const [id, d] of rowsOf(tables, "incident_drop")) st.incidentDrops.set(id, { ...d });
  st.incidentsDropped = incidentsDroppedOf(tables);
  st.generationFloor = generationFloorOf(tables);
}

export function incidentInvariants(st: ServerState): void {
  let open = 0;
  const by = new Map<string, number>();
  for (const [id, i] of st.incidents) {
    assert(i.id === id, "incident key mismatch");
    if (i.acknowledged) continue;
    open++;
    by.set(i.clientId, (by.get(i.clientId) ?? 0) + 1);
  }
  assert(open === st.openIncidents && by.size === st.openByClient.size, "open incident index drift");
  for (const [id, n] of by) {
    assert(st.openByClient.get(id) === n, `open incident index drift for ${id}`);
    assert(n <= Math.max(MAX_OPEN_INCIDENTS_PER_CLIENT, st.openOverByClient.get(id) ?? 0), `${id}: ${n} open incidents over the per-client bound`);
  }
  assert(open <= MAX_OPEN_INCIDENTS, `${open} open incidents over the bound`);
  assert(st.incidents.size <= MAX_INCIDENTS_KEPT, "incidents over their bound");
  let dropped = 0;
  for (const [id, d] of st.incidentDrops) {
    assert(d.clientId === id && d.count > 0, `drop counter of ${id} malformed`);
    assert(st.clients.has(id), `drop counter of unknown client ${id}`);
    dropped += d.count;
  }
  assert(dropped <= st.incidentsDropped, "per-client drop counts exceed the total");
}

export function ackIncident(st: ServerState, ctx: ServerCtx, r: Extract<ControlRequest, { op: "ack_incident" }>): void {
  const inc = st.incidents.get(r.incidentId);
  if (!inc) return replyError(ctx, r.requestId, Code.NOT_FOUND, `no incident ${r.incidentId}`);
  if (!inc.acknowledged) noteOpen(st, inc.clientId, -1);
  inc.acknowledged = true;
  ctx.persist(incidentRecord(inc));
  return reply(ctx, r.requestId, { ok: true });
}
