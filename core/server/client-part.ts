// One client's part of the server state, restored and dropped on its own
// (issue 13: the step after this one runs several servers on one store,
// each owning some clients). Nothing calls these yet but tests; the shells
// still restore a whole server (restore.ts).
//
// Per client (the part): the client record, its commands (held and
// pruned) with their script, stdin, event and retention rows, its last
// reconcile result, its incidents and its incident drop counter; and every
// derived index and total over them: `active`, `history`, `clientOutput`,
// `openByClient`, `openOverByClient`, `openIncidents`, `metaBytes`.
//
// Global (no part holds it): the counters (`incidentsDropped`,
// `generationFloor`, `auditDropped`), `incidentSeq`, the audit log, the
// jobs (a job names commands of several clients: restore its rows with
// restoreJobs once the parts are in), `clientsAtRestore`, connections and
// the durable gate. Adopting a part raises `incidentSeq` and
// `clientsAtRestore` as a restore would; dropping one lowers neither (an id
// is never handed out twice, and the bound stays where a restore put it).
//
// Order: maps in insertion order keep it within a client (a part's rows go
// in in row order, as a restore puts them); between clients they follow the
// order the parts came in. Where the order across clients decides something
// it is kept sorted instead: `history` by end time and the pruned ledger by
// prune time, each merged so that what was there keeps its order.
//
// The global bounds (maxClients, prunedMax, the open-incident totals) are
// not enforced here: parts taken from one server's tables fit, as they fit
// there. A server adopting parts of others must check them first.

import { isTerminal } from "../dispatch/lifecycle.js";
import { assert, Code, type CoreError, coreError } from "../errors.js";
import { MAX_OPEN_INCIDENTS_PER_CLIENT } from "../limits.js";
import type { PrunedCommand, ServerCommand, ServerConfig, ServerState } from "./server-types.js";
import { type PrunedRow, type ServerTableName, type ServerTables, parseIncidentKey, restoreClient, rowsOf } from "./store.js";
import { ledgerRowOf, loadCommands, restoreServer } from "./restore.js";
import { restoreJobs } from "./jobs.js";
import { deactivate } from "./active.js";

/** How each table's rows are assigned to a client: by key, by the row's clientId, or by its command's client. */
export const TABLE_OWNERS = {
  client: "key",
  command: "row",
  script: "command",
  stdin: "command",
  event: "command",
  retention: "command",
  pruned: "row",
  reconcile: "key",
  incident: "row",
  incident_drop: "key",
  counter: "global",
  audit: "global",
  refusal: "global",
  job: "global",
} as const satisfies Record<ServerTableName, "key" | "row" | "command" | "global">;

const TABLES = Object.keys(TABLE_OWNERS) as ServerTableName[];

/** The command uuid a row key of a per-command table names (`uuid` or `uuid/seq`). */
const uuidOfKey = (table: ServerTableName, key: string): string => (table === "stdin" || table === "event" ? key.slice(0, key.lastIndexOf("/")) : key);

const rowClient = (v: unknown): string | undefined => (v as { clientId?: string } | null)?.clientId;

/** The uuid -> client id of every command row. */
function commandClients(tables: ServerTables): Map<string, string> {
  const m = new Map<string, string>();
  for (const [uuid, r] of rowsOf(tables, "command")) m.set(uuid, r.clientId);
  return m;
}

/** Which client a row belongs to ("" for a global row, or a per-command row whose command has no record). */
function ownerOf(table: ServerTableName, key: string, value: unknown, commands: Map<string, string>): string {
  switch (TABLE_OWNERS[table]) {
    case "key":
      return key;
    case "row":
      return rowClient(value) ?? "";
    case "command":
      return commands.get(uuidOfKey(table, key)) ?? "";
    case "global":
      return "";
  }
}

/** Every client id some per-client row names, sorted. */
export function clientIdsOf(tables: ServerTables): string[] {
  const commands = commandClients(tables);
  const ids = new Set<string>();
  for (const t of TABLES) for (const [k, v] of tables.get(t) ?? []) ids.add(ownerOf(t, k, v, commands));
  ids.delete("");
  return [...ids].sort();
}

/** The rows of `tables` that belong to `clientId` (what restoreClientPart takes), in their order. */
export function clientTables(tables: ServerTables, clientId: string): ServerTables {
  const commands = commandClients(tables);
  const out = new Map<string, Map<string, unknown>>();
  for (const t of TABLES) {
    const m = new Map<string, unknown>();
    for (const [k, v] of tables.get(t) ?? []) if (ownerOf(t, k, v, commands) === clientId) m.set(k, v);
    if (m.size > 0) out.set(t, m);
  }
  return { get: (t) => out.get(t) };
}

/** Only the global tables of `tables` (counters, audit, jobs). */
export function globalTables(tables: ServerTables, without: ServerTableName[] = []): ServerTables {
  return { get: (t) => (TABLE_OWNERS[t as ServerTableName] === "global" && !without.includes(t as ServerTableName) ? tables.get(t) : undefined) };
}

/**
 * A whole server restored the way a server that owns clients one by one
 * would build it: the global tables (jobs last, as they name commands of
 * several clients), then each client's part in client id order. Equal to
 * restoreServer up to the order of entries across clients (client-part.test.ts).
 */
export function restoreServerByParts(config: ServerConfig, tables: ServerTables, seed: number): ServerState {
  const st = restoreServer(config, globalTables(tables, ["job"]), seed);
  for (const id of clientIdsOf(tables)) {
    const r = restoreClientPart(st, id, clientTables(tables, id));
    assert(r.ok, `client ${id}: its part would not restore: ${r.ok ? "" : r.error.message}`);
  }
  restoreJobs(st, rowsOf(tables, "job"));
  return st;
}

export type PartResult = { ok: true } | { ok: false; error: CoreError };
const refused = (code: Code, message: string): PartResult => ({ ok: false, error: coreError(code, message) });

/** Whether the server holds anything of `clientId`. */
export function holdsClient(st: ServerState, clientId: string): boolean {
  if (st.clients.has(clientId) || st.clientOutput.has(clientId) || st.openByClient.has(clientId) || st.incidentDrops.has(clientId)) return true;
  for (const c of st.commands.values()) if (c.clientId === clientId) return true;
  for (const p of st.pruned.values()) if (p.clientId === clientId) return true;
  for (const i of st.incidents.values()) if (i.clientId === clientId) return true;
  return false;
}

/**
 * Add one client's part, from its rows (`clientTables`), with every index
 * and total kept exact. Refused (nothing changed) when the server already
 * holds something of that client, when a row belongs to another client, or
 * when a command or incident id is already held.
 */
export function restoreClientPart(st: ServerState, clientId: string, part: ServerTables): PartResult {
  if (clientId === "") return refused(Code.VALIDATION, "client id is required");
  if (holdsClient(st, clientId)) return refused(Code.CONFLICT, `the server already holds client ${clientId}`);
  const commands = commandClients(part);
  for (const t of TABLES) {
    for (const [k, v] of part.get(t) ?? []) {
      if (ownerOf(t, k, v, commands) !== clientId) return refused(Code.VALIDATION, `row ${t}/${k} does not belong to client ${clientId}`);
    }
  }
  for (const uuid of commands.keys()) if (st.commands.has(uuid) || st.pruned.has(uuid)) return refused(Code.CONFLICT, `command ${uuid} is already held`);
  for (const [uuid] of rowsOf(part, "pruned"))
    if (st.commands.has(uuid) || st.pruned.has(uuid)) return refused(Code.CONFLICT, `command ${uuid} is already held`);
  for (const [id] of rowsOf(part, "incident")) if (st.incidents.has(id)) return refused(Code.CONFLICT, `incident ${id} is already held`);

  for (const [id, c] of rowsOf(part, "client")) {
    st.clients.set(id, restoreClient(c));
    if (c.authorization) st.authorized.add(id);
  }
  st.clientsAtRestore = Math.max(st.clientsAtRestore, st.clients.size);
  let open = 0;
  for (const [id, v] of rowsOf(part, "incident")) {
    st.incidents.set(id, { ...v });
    const n = parseIncidentKey(id);
    if (Number.isFinite(n) && n > st.incidentSeq) st.incidentSeq = n;
    if (!v.acknowledged) open++;
  }
  if (open > 0) {
    st.openByClient.set(clientId, open);
    st.openIncidents += open;
    if (open > MAX_OPEN_INCIDENTS_PER_CLIENT) st.openOverByClient.set(clientId, open);
  }
  for (const [id, d] of rowsOf(part, "incident_drop")) st.incidentDrops.set(id, { ...d });
  // History in the store: ended commands are ledger entries, as a whole restore makes them (restore.ts).
  const archive = st.config.limits.historyInStore;
  const added = loadCommands(st, part, (_, r) => !archive || !isTerminal(r.state));
  mergeHistory(st, added);
  const ledger = [...rowsOf(part, "pruned")].map(([, v]) => v);
  if (archive)
    for (const [, r] of rowsOf(part, "command")) {
      if (!isTerminal(r.state)) continue;
      ledger.push(ledgerRowOf(r));
    }
  mergePruned(st, ledger);
  return { ok: true };
}

/** The part's ended commands into the history index, by end time (as restoreHistory orders them), after equal ones held. */
function mergeHistory(st: ServerState, added: ServerCommand[]): void {
  const ended = added.filter((c) => isTerminal(c.state));
  if (ended.length === 0) return;
  ended.sort((a, b) => a.endedAt - b.endedAt || a.createdAt - b.createdAt);
  const held = [...st.history];
  st.history.clear();
  let i = 0;
  for (const c of ended) {
    while (i < held.length && held[i]![1] <= c.endedAt) st.history.set(...held[i++]!);
    st.history.set(c.uuid, c.endedAt);
  }
  while (i < held.length) st.history.set(...held[i++]!);
}

/** The part's pruned records into the ledger, by prune time (as restoreHistory orders them), after equal ones held. */
function mergePruned(st: ServerState, rows: readonly PrunedRow[]): void {
  const added = rows.map((v) => ({ ...v }));
  if (added.length === 0) return;
  const order = (a: PrunedCommand, b: PrunedCommand): number => a.at - b.at || a.endedAt - b.endedAt;
  added.sort(order);
  const held = [...st.pruned.values()];
  st.pruned.clear();
  let i = 0;
  for (const p of added) {
    while (i < held.length && order(held[i]!, p) <= 0) {
      const h = held[i++]!;
      st.pruned.set(h.uuid, h);
    }
    st.pruned.set(p.uuid, p);
  }
  while (i < held.length) {
    const h = held[i++]!;
    st.pruned.set(h.uuid, h);
  }
}

/**
 * Remove everything of one client (its part), with every index and total
 * kept exact; its rows stay in the store for whoever adopts it. Refused
 * (nothing changed) while the client has a live connection, while a job
 * still has work for it (a pending or started child: the job's owner would
 * start or watch a command this server no longer holds), or while a persist
 * is not yet durable (the rows would be behind the state being dropped).
 */
export function dropClientPart(st: ServerState, clientId: string): PartResult {
  const client = st.clients.get(clientId);
  if (client && client.conn !== 0) return refused(Code.CONFLICT, `client ${clientId} has a live connection`);
  for (const id of st.activeJobs) {
    const child = st.jobs.get(id)!.children.find((ch) => ch.clientId === clientId);
    if (child && (child.phase === "pending" || child.phase === "started")) return refused(Code.CONFLICT, `job ${id} still has work for client ${clientId}`);
  }
  if (st.gate.durableThrough < st.gate.lastId || st.gate.waiting.length > 0) return refused(Code.CONFLICT, "a persist is not yet durable");
  st.clients.delete(clientId);
  for (const c of [...st.commands.values()]) {
    if (c.clientId !== clientId) continue;
    deactivate(st, c);
    st.metaBytes -= c.charged;
    st.history.delete(c.uuid);
    st.commands.delete(c.uuid);
  }
  st.clientOutput.delete(clientId);
  for (const p of [...st.pruned.values()]) if (p.clientId === clientId) st.pruned.delete(p.uuid);
  for (const i of [...st.incidents.values()]) if (i.clientId === clientId) st.incidents.delete(i.id);
  st.openIncidents -= st.openByClient.get(clientId) ?? 0;
  st.openByClient.delete(clientId);
  st.openOverByClient.delete(clientId);
  st.incidentDrops.delete(clientId);
  st.dropsDirty.delete(clientId);
  return { ok: true };
}
