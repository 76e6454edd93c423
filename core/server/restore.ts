// A server from its durable tables (store.ts): no connection survives a
// restart; derived indexes are rebuilt.

import { SUPPORTED_PROTOCOL } from "../codec/version.js";
import { isTerminal } from "../dispatch/lifecycle.js";
import * as LIM from "../limits.js";
import { SERVER_RECENT_DIGESTS } from "../limits.js";
import { rngFromSeed } from "../rng.js";
import { newGate } from "../step-context.js";
import type { PrunedCommand, ServerCommand, ServerConfig, ServerDeferred, ServerState } from "./server-types.js";
import { type CommandRow, type ScriptRow, type ServerTables, parseIncidentKey, restoreClient, restoreCommand, rowsOf } from "./store.js";
import { restoreAudit } from "./audit.js";
import { ledgerEntry, restoreHistory } from "./history.js";
import { restoreIncidentIndex } from "./incidents.js";
import { restoreJobs } from "./jobs.js";
import { recharge } from "./metadata.js";
import { activate, newActiveIndex } from "./active.js";
import { newHeartbeatIndex } from "./heartbeats.js";
import { noteOutput } from "./retention.js";

export function defaultServerConfig(): ServerConfig {
  return {
    protocol: SUPPORTED_PROTOCOL,
    limits: {
      outputPerCommand: LIM.SERVER_OUTPUT_PER_COMMAND_BYTES,
      outputPerClient: LIM.SERVER_OUTPUT_PER_CLIENT_BYTES,
      segmentBytes: LIM.SERVER_SEGMENT_BYTES,
      ingressHigh: LIM.SERVER_INGRESS_HIGH_WATERMARK_BYTES,
      maxInflightDispatches: LIM.MAX_INFLIGHT_DISPATCHES,
      maxActivePerClient: LIM.MAX_ACTIVE_COMMANDS_PER_CLIENT,
      reconcileTargets: LIM.MAX_RECONCILE_TARGETS,
      redeliveryMs: LIM.REDELIVERY_TIMEOUT_MS,
      authorizationTtlMs: LIM.AUTHORIZATION_TTL_MS,
      stdinWindow: LIM.SERVER_STDIN_WINDOW_BYTES,
      stdinQueue: LIM.SERVER_STDIN_QUEUE_BYTES,
      scriptWindow: LIM.SCRIPT_UPLOAD_WINDOW_BYTES,
      metadataBudget: LIM.SERVER_METADATA_BUDGET_BYTES,
      historyMs: LIM.SERVER_HISTORY_MS,
      prunedMax: LIM.SERVER_PRUNED_LEDGER_MAX,
      historyInStore: false,
      historyHeld: LIM.SERVER_HISTORY_HELD,
      maxClients: LIM.MAX_CLIENTS,
      auditMax: LIM.MAX_AUDIT_ENTRIES,
      maxFollowStreams: LIM.MAX_FOLLOW_STREAMS,
      maxFollowStreamsPerIdentity: LIM.MAX_FOLLOW_STREAMS_PER_IDENTITY,
      followStreamsAdminReserve: LIM.FOLLOW_STREAMS_ADMIN_RESERVE,
      auditRefusalMax: LIM.MAX_AUDIT_REFUSALS,
    },
  };
}

export function newServer(config: ServerConfig, seed: number): ServerState {
  return restoreServer(config, { get: () => undefined }, seed);
}

/**
 * Rebuild the server from its durable tables. No connection survives a restart.
 * Each table's rows must come in the order they were first written (the
 * store's contract: kv-store's LOAD_ALL, the simulator's disk): the commands'
 * order is the active index's (dispatch oldest first), the incidents' the
 * order the oldest acknowledged one is evicted in. Orders with a key of their
 * own (history, the pruned ledger, audit, jobs, stdin writes) are sorted here.
 */
export function restoreServer(config: ServerConfig, tables: ServerTables, seed: number): ServerState {
  const st: ServerState = {
    config,
    rng: rngFromSeed(seed),
    clients: new Map(),
    conns: new Map(),
    commands: new Map(),
    active: new Set(),
    activeIndex: newActiveIndex(),
    heartbeats: newHeartbeatIndex(),
    authorized: new Set(),
    history: new Map(),
    metaBytes: 0,
    pruned: new Map(),
    clientOutput: new Map(),
    incidents: new Map(),
    incidentSeq: 0,
    openIncidents: 0,
    openByClient: new Map(),
    openOverByClient: new Map(),
    incidentDrops: new Map(),
    incidentsDropped: 0,
    dropsDirty: new Set(),
    generationFloor: 0,
    clientsAtRestore: 0,
    audit: new Map(),
    auditSeq: 0,
    auditDropped: 0,
    auditAtRestore: 0,
    refusals: new Map(),
    refusalOpen: new Map(),
    refusalSeq: 0,
    refusalsDropped: 0,
    refusalsAtRestore: 0,
    jobs: new Map(),
    activeJobs: new Set(),
    gate: newGate<ServerDeferred>(),
    wake: null,
  };
  for (const [id, c] of rowsOf(tables, "client")) {
    st.clients.set(id, restoreClient(c));
    if (c.authorization) st.authorized.add(id);
  }
  for (const [id, v] of rowsOf(tables, "incident")) {
    st.incidents.set(id, { ...v });
    const n = parseIncidentKey(id);
    if (Number.isFinite(n) && n > st.incidentSeq) st.incidentSeq = n;
  }
  restoreIncidentIndex(st, tables);
  restoreAudit(st, tables);
  st.clientsAtRestore = st.clients.size;
  restoreCommands(st, tables);
  restoreJobs(st, rowsOf(tables, "job"));
  return st;
}

/**
 * With the history in the store, a restore turns every ended command row it
 * is given into its ledger entry (`ledgerRowOf`) and holds nothing else of
 * it. A store may therefore hand ended commands over already reduced, as
 * ledger rows under this name (key: uuid) instead of as command rows, so
 * that reading many (the newest prunedMax) never holds them all as rows at
 * once; the restore is the same either way.
 */
export const ARCHIVED_TABLE = "archived";

/** The ledger entry a restore makes of an ended command's row (history in the store). */
export function ledgerRowOf(r: CommandRow): PrunedCommand {
  const c = restoreCommand(r, undefined);
  return ledgerEntry(c, c.endedAt);
}

export function restoreCommands(st: ServerState, tables: ServerTables): void {
  if (!st.config.limits.historyInStore) {
    loadCommands(st, tables);
    restoreHistory(st, rowsOf(tables, "pruned"));
    return;
  }
  // History in the store: no ended command is held, each is a ledger entry.
  // (No job waits for one: a job records its child's end in the step that
  // ends it, so their rows share a batch; jobInvariants checks it.)
  const archived: PrunedCommand[] = [];
  const live = (_: string, r: CommandRow): boolean => !isTerminal(r.state);
  for (const [, r] of rowsOf(tables, "command")) if (!live("", r)) archived.push(ledgerRowOf(r));
  // Ended commands the store handed over already reduced (ARCHIVED_TABLE): the same entries.
  for (const p of (tables.get(ARCHIVED_TABLE)?.values() ?? []) as Iterable<PrunedCommand>) archived.push(p);
  loadCommands(st, tables, live);
  restoreHistory(st, rowsOf(tables, "pruned"), archived);
}

/**
 * Add the commands of `tables` to the server, with their stdin rows and
 * recent digests, the active and output indexes and the metadata charge
 * (not the history index or the pruned ledger). Returns them, in row order.
 */
export function loadCommands(st: ServerState, tables: ServerTables, hold: (uuid: string, r: CommandRow) => boolean = () => true): ServerCommand[] {
  const scripts = tables.get("script");
  const added: ServerCommand[] = [];
  for (const [uuid, r] of rowsOf(tables, "command")) {
    if (!hold(uuid, r)) continue;
    const c = restoreCommand(r, scripts?.get(uuid) as ScriptRow | undefined);
    st.commands.set(uuid, c);
    added.push(c);
    if (!isTerminal(c.state)) activate(st, c);
    if (c.output.storedOutputBytes > 0) noteOutput(st, c, c.output.storedOutputBytes);
    recharge(st, c);
  }
  // Stdin writes taken but not yet acknowledged, in seq order (keys sort so; the record's inline ones are older).
  const withRows = new Set<ServerCommand>();
  for (const [key, op] of rowsOf(tables, "stdin")) {
    const c = st.commands.get(key.slice(0, key.lastIndexOf("/")));
    if (!c || isTerminal(c.state) || op.seq <= c.stdin.ackedThrough) continue;
    c.stdin.queue.push({ ...op });
    withRows.add(c);
  }
  for (const c of withRows) c.stdin.queue.sort((a, b) => a.seq - b.seq);
  // Digests of the most recent stored events, for resend checks after a restart.
  for (const [key, e] of rowsOf(tables, "event")) {
    const uuid = key.slice(0, key.lastIndexOf("/"));
    const c = st.commands.get(uuid);
    if (c && e.seq > c.ingest.storedThrough - SERVER_RECENT_DIGESTS) c.ingest.digests[e.seq] = e.digest;
  }
  return added;
}
